"""The knowledge base: every error text diagnose and run's crash triage know, as data.

Each entry (a :class:`Signature`) holds the pattern, the finding it leads to, the fields it
extracts, the releases that print that wording, and real example lines with the public
thread (or the recorded run) they came from; ``tests/unit/test_logscan_kb.py`` runs every
example through its signature. To teach ddpdoctor a new error text, add a Signature to
the module of its subsystem; no triage code changes unless the text needs a new rule.
"""

from __future__ import annotations

from collections.abc import Iterator

from ddpdoctor.diagnose.kb import (
    advice,
    bugs,
    c10d,
    deepspeed,
    families,
    gpu,
    horovod,
    mpi,
    nccl,
    process,
    stacks,
)
from ddpdoctor.diagnose.kb.signature import Example, NeedleIndex, Signature

__all__ = ["SIGNATURES", "Example", "Signature", "match_line", "needles"]

SIGNATURES: tuple[Signature, ...] = (bugs.SIGNATURES + c10d.SIGNATURES + nccl.SIGNATURES
                                     + gpu.SIGNATURES + process.SIGNATURES
                                     + families.SIGNATURES + horovod.SIGNATURES + mpi.SIGNATURES
                                     + deepspeed.SIGNATURES + advice.SIGNATURES
                                     + stacks.SIGNATURES)


# A line reaches only the signatures whose needle it holds (no other can match it)
_BY_NEEDLE = NeedleIndex([sig.needles for sig in SIGNATURES])


def match_line(body: str, cont: str = ""
               ) -> Iterator[tuple[Signature, dict[str, object]]]:
    """Every signature that matches ``body``; fallback wordings only when nothing else did.
    ``cont``, the next line: a signature whose needle ``body`` holds but whose text runs
    past its end (a paste or terminal wrapped it) is matched on the two joined."""
    candidates = [SIGNATURES[i] for i in _BY_NEEDLE.held(body)]
    joined = f"{body.rstrip()} {cont.strip()}" if cont.strip() else ""
    matched = False
    for sig in candidates:
        if sig.fallback:
            continue
        data = sig.match(body)
        if data is None and joined:
            data = sig.match(joined)
        if data is not None:
            matched = True
            yield sig, data
    if matched:
        return
    for sig in candidates:
        if sig.fallback:
            data = sig.match(body)
            if data is not None:
                yield sig, data


def needles() -> tuple[str, ...]:
    """The literals the reader's prefilter must look for so that every signature can fire."""
    return _BY_NEEDLE.needles
