"""One run's numbers, whatever printed them: the trainer's JSON log or a user's lines.

Both become a :class:`RunMeasurement`: per-step throughput of the whole job and, where
known, each rank's data wait and compute time of each step. The first ``warmup`` steps
are dropped (step 1 builds DDP's buckets, allocates, warms caches).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from ddpdoctor.scale.lines import ThroughputLine, parse_lines


@dataclass(frozen=True)
class StepSample:
    """One step: the job's step time and each rank's data wait and compute (forward) time.
    ``data_s``/``compute_s`` are empty when the run did not report per-rank times."""

    step_s: float
    data_s: tuple[float, ...] = ()
    compute_s: tuple[float, ...] = ()

    @property
    def timed(self) -> bool:
        return bool(self.data_s) and len(self.data_s) == len(self.compute_s)


@dataclass
class RunMeasurement:
    world: int
    unit: str                      # "tokens/s" | "samples/s"
    throughput: list[float]        # per measured step (or printed line), the whole job's
    steps: list[StepSample] = field(default_factory=list)
    rank_batch: int | None = None  # samples per rank per step, when known

    @property
    def timed(self) -> bool:
        return bool(self.steps) and all(s.timed and len(s.data_s) == self.world
                                        for s in self.steps)


class NoThroughput(ValueError):
    """A run that finished without a single usable throughput number."""


def from_trainer_records(lines: Iterable[str], world: int, warmup: int,
                         rank_batch: int | None = None) -> RunMeasurement:
    """The trainer's ``--json-log`` (``event: step`` records, rank 0's view of every rank)."""
    records = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("event") == "step":
            records.append(rec)
    kept = records[warmup:] if len(records) > warmup else records[-1:]
    if not kept:
        raise NoThroughput("the trainer wrote no step records to its --json-log")
    steps, rates = [], []
    for rec in kept:
        data = tuple(float(x) for x in rec.get("rank_data_s") or ())
        comp = tuple(float(x) for x in rec.get("rank_compute_s") or ())
        steps.append(StepSample(float(rec["step_time_s"]), data, comp))
        rates.append(float(rec["tokens_per_s"]))
    return RunMeasurement(world, "tokens/s", rates, steps, rank_batch)


def from_user_output(text: str, world: int, warmup: int,
                     rank_batch: int | None = None) -> RunMeasurement:
    """A user command's output: its ``ddpdoctor-throughput:`` lines (see ``lines``)."""
    parsed = parse_lines(text)
    if not parsed:
        raise NoThroughput("printed no 'ddpdoctor-throughput: N samples/s' line")
    lead = min((p.rank for p in parsed if p.rank is not None), default=None)
    main = [p for p in parsed if p.rank is None or p.rank == lead]
    units = {p.unit for p in main}
    if len(units) > 1:
        raise NoThroughput(f"mixes units ({', '.join(sorted(units))}): print one")
    main = main[warmup:] if len(main) > warmup else main[-1:]
    return RunMeasurement(world, main[0].unit, [p.value for p in main],
                          _user_steps(parsed, world, warmup), rank_batch)


def _user_steps(parsed: list[ThroughputLine], world: int, warmup: int) -> list[StepSample]:
    """Steps where every rank printed its times (``rank=`` with ``data_s`` and
    ``compute_s``); steps are matched by ``step=`` or else by each rank's line order."""
    by_step: dict[int, dict[int, ThroughputLine]] = defaultdict(dict)
    seen: dict[int, int] = defaultdict(int)
    for p in parsed:
        if p.rank is None or not {"data_s", "compute_s"} <= set(p.times):
            continue
        step = p.step if p.step is not None else seen[p.rank]
        seen[p.rank] += 1
        by_step[step][p.rank] = p
    out = []
    for step in sorted(by_step)[warmup:]:
        ranks = by_step[step]
        if sorted(ranks) != list(range(world)):
            continue
        rows = [ranks[r] for r in range(world)]
        step_s = max(r.times.get("step_s", 0.0) for r in rows)
        if step_s <= 0:
            continue
        out.append(StepSample(step_s, tuple(r.times["data_s"] for r in rows),
                              tuple(r.times["compute_s"] for r in rows)))
    return out
