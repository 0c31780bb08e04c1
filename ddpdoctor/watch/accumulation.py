"""GRAD_ACCUM_OUT_OF_STEP: ranks that run different numbers of micro-batches per step.

With gradient accumulation each optimizer step is several forwards/backwards, all but the
last under DDP's ``no_sync``. When ranks accumulate different counts (a per-rank batch
size, a rank that skips a micro-batch), the replicas stay identical (the synchronised
backward averages whatever each rank accumulated), so it is no desync: but each rank
weighs its data differently, and one runs out of data before the others (a hang at the
epoch's end). Reported when two check steps in a row show the same uneven counts.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING

from ddpdoctor.core.findings import Finding

if TYPE_CHECKING:
    from ddpdoctor.watch.context import CheckContext

log = logging.getLogger("ddpdoctor.watch")


def odd_counts(micro: list[int], ranks: list[int]) -> list[int]:
    """Pure: the ranks whose count differs from the majority's (all of them, no majority)."""
    counts = Counter(micro).most_common()
    if len(counts) < 2:
        return []
    if counts[0][1] == counts[1][1]:
        return sorted(ranks)
    return sorted(r for r, m in zip(ranks, micro) if m != counts[0][0])


class AccumulationCheck:
    """Called from the desync check's analysis with each group's micro-batch counts."""

    def __init__(self) -> None:
        self.previous: dict[tuple[int, ...], tuple[int, ...]] = {}
        self.reported: set[tuple[int, ...]] = set()
        self.noted = False

    def look(self, w: CheckContext, step: int, group: list[int], micro: list[int]) -> list[Finding]:
        if max(micro, default=0) > 1 and not self.noted:
            self.noted = True
            note = (f"gradient accumulation: {max(micro)} micro-batches per optimizer step; "
                    "steps are optimizer steps and replicas are compared only after "
                    "synchronised steps")
            log.info("ddpdoctor: %s", note)
            w.sink.write({"kind": "note", "message": note}, step)
        key, counts = tuple(group), tuple(micro)
        before = self.previous.get(key)
        self.previous[key] = counts
        odd = odd_counts(micro, group)
        if not odd or before != counts or key in self.reported:
            return []
        self.reported.add(key)
        per_rank = {str(r): m for r, m in zip(group, micro)}
        text = ", ".join(f"rank {r}: {m}" for r, m in zip(group, micro))
        return [Finding(
            "GRAD_ACCUM_OUT_OF_STEP",
            f"gradient accumulation out of step: micro-batches per optimizer step differ "
            f"by rank ({text})",
            ranks=odd,
            evidence={"step": step, "micro_batches_per_step": per_rank, "group": group,
                      "why": "replicas stay identical (the synchronised backward averages "
                             "what each rank accumulated), but ranks weigh their data "
                             "differently and the rank with more micro-batches per step "
                             "runs out of data first: the others then hang in their "
                             "next gradient all-reduce"})]
