"""Pure: the job's regular sequence of collectives, and the rank that left it.

A training step issues the same collectives in the same order with the same sizes every
time (DDP's bucket all-reduces, FSDP's all-gathers and reduce-scatters, ZeRO's
broadcasts). Per process group, the Flight Recorder entries every rank agrees on are that
sequence repeated; its period is the shortest shift under which the agreed tail repeats.
Past the agreed part, the sequence predicts what each rank should have enqueued next:

- a rank whose next entry is not the predicted one left the sequence: it called a
  collective the others do not call (a rank-guarded checkpoint, a metrics gather);
- a rank with fewer entries while the others' extra entries are the predicted ones skipped
  a call (or is busy elsewhere);
- ranks that agree on the op but whose sizes are a permutation of the sequence's sizes
  call the right collectives in another order: a parameter-order mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddpdoctor.attach.flight_recorder import FrTrace

BREAKS = "left the regular sequence"
MISSING = "is missing a collective"
PARAM_ORDER = "runs the step's collectives in another parameter order (sizes permuted)"


@dataclass(frozen=True)
class SequenceVerdict:
    """One process group: who left the job's regular sequence of collectives, and how."""

    pg: str
    kind: str  # BREAKS, MISSING or PARAM_ORDER
    culprits: tuple[int, ...]
    period: int  # collectives per step in the regular sequence
    seq: int  # the collective number where it happened
    expected: str  # what the regular sequence has there ("all_reduce [[16, 8]]")
    got: dict[int, str] = field(default_factory=dict)  # rank -> what it enqueued there

    def describe(self) -> str:
        ranks = ",".join(map(str, self.culprits))
        got = "; ".join(f"rank {r}: {k}" for r, k in sorted(self.got.items()))
        return (f"pg {self.pg}: rank {ranks} {self.kind} at collective #{self.seq} "
                f"(the job repeats {self.period} collectives per step; expected "
                f"{self.expected}{'; ' + got if got else ''})")


def _key(op: str, shape: str) -> str:
    return f"{op} {shape}".strip()


def _per_rank(traces: dict[int, FrTrace], pg: str) -> dict[int, dict[int, str]]:
    out: dict[int, dict[int, str]] = {}
    for rank, t in traces.items():
        seqs = {e.seq: _key(e.op, e.shape) for e in t.entries if e.pg == pg and not e.is_p2p}
        if seqs:
            out[rank] = seqs
    return out


def _agreed(keys: dict[int, dict[int, str]]) -> dict[int, str]:
    """The entries every rank has and agrees on, up to the first disagreement."""
    common = set.intersection(*(set(k) for k in keys.values()))
    agreed: dict[int, str] = {}
    for seq in sorted(common):
        values = {k[seq] for k in keys.values()}
        if len(values) != 1:
            break
        agreed[seq] = values.pop()
    return agreed


def period_of(history: list[str]) -> int:
    """The shortest shift under which the tail of ``history`` repeats (0: none found).

    Only the tail is checked: the first steps may differ (DDP's start-up broadcasts,
    ZeRO's first step). Three repetitions are preferred; two are enough when the job had
    only that many steps before it hung.
    """
    n = len(history)
    for reps in (3, 2):
        for p in range(1, n // reps + 1):
            span = (reps - 1) * p
            if all(history[i] == history[i - p] for i in range(n - span, n)):
                return p
    return 0


def _expected(agreed: list[tuple[int, str]], period: int, seq: int) -> str:
    last = agreed[-1][0]
    back = seq - period * (-(-(seq - last) // period))
    return dict(agreed).get(back, "")


def _permuted(agreed: list[tuple[int, str]], period: int, key: str, expected: str) -> bool:
    """Same op as expected, other sizes, and those sizes occur elsewhere in one step."""
    step = {k for _, k in agreed[-period:]}
    return key != expected and key.split(" ", 1)[0] == expected.split(" ", 1)[0] \
        and key in step


def compare_sequences(traces: dict[int, FrTrace]) -> list[SequenceVerdict]:
    """Per process group, the ranks whose entries leave the regular sequence."""
    pgs = sorted({e.pg for t in traces.values() for e in t.entries if not e.is_p2p})
    verdicts = []
    for pg in pgs:
        v = _judge_group(pg, _per_rank(traces, pg))
        if v is not None:
            verdicts.append(v)
    return verdicts


@dataclass(frozen=True)
class _Split:
    """Where each rank stands at the first seq past the part every rank agrees on."""

    pg: str
    keys: dict[int, dict[int, str]]
    agreed: list[tuple[int, str]]
    period: int
    first_seq: int
    expected: str
    got: dict[int, str]
    off: list[int]  # enqueued something else than the sequence predicts
    on: list[int]  # enqueued what it predicts
    behind: list[int]  # enqueued nothing there yet

    def permuted(self, ranks: list[int]) -> bool:
        return all(_permuted(self.agreed, self.period, self.got[r], self.expected)
                   for r in ranks)

    def verdict(self, kind: str, ranks: list[int], with_got: bool = True) -> SequenceVerdict:
        return SequenceVerdict(self.pg, kind, tuple(ranks), self.period, self.first_seq,
                               self.expected, {r: self.got[r] for r in ranks} if with_got
                               else {})


def _split(pg: str, keys: dict[int, dict[int, str]]) -> _Split | None:
    if len(keys) < 2:
        return None
    agreed = sorted(_agreed(keys).items())
    period = period_of([k for _, k in agreed])
    if not period:
        return None
    first_seq = agreed[-1][0] + 1
    got = {r: k[first_seq] for r, k in keys.items() if first_seq in k}
    expected = _expected(agreed, period, first_seq)
    if not got or not expected:
        return None
    return _Split(pg, keys, agreed, period, first_seq, expected, got,
                  sorted(r for r, key in got.items() if key != expected),
                  sorted(r for r, key in got.items() if key == expected),
                  sorted(r for r in keys if r not in got))


def _some_off(sp: _Split) -> SequenceVerdict | None:
    if not (sp.off and sp.on):
        return None
    return sp.verdict(PARAM_ORDER if sp.permuted(sp.off) else BREAKS, sp.off)


def _all_off(sp: _Split) -> SequenceVerdict | None:
    # nobody enqueued what the sequence predicts: an order mismatch between ranks, or
    # both sides off; with sizes permuted it is parameter order, culprit unknown
    if sp.off and not sp.on and len({sp.got[r] for r in sp.off}) > 1 \
            and sp.permuted(sp.off):
        return SequenceVerdict(sp.pg, PARAM_ORDER, (), sp.period, sp.first_seq,
                               sp.expected, dict(sp.got))
    return None


def _missing(sp: _Split) -> SequenceVerdict | None:
    if sp.behind and sp.on and not sp.off \
            and _extra_entries_regular(sp.keys, sp.on, sp.agreed, sp.period):
        return sp.verdict(MISSING, sp.behind, with_got=False)
    return None


def _extra_call(sp: _Split) -> SequenceVerdict | None:
    # the ranks ahead enqueued something the sequence does not predict while the others
    # enqueued nothing: the ones ahead made an extra call
    if sp.behind and sp.off and not sp.on and len({sp.got[r] for r in sp.off}) <= 1:
        return sp.verdict(BREAKS, sp.off)
    return None


def _judge_group(pg: str, keys: dict[int, dict[int, str]]) -> SequenceVerdict | None:
    sp = _split(pg, keys)
    if sp is None:
        return None
    for rule in (_some_off, _all_off, _missing, _extra_call):
        v = rule(sp)
        if v is not None:
            return v
    return None


def _extra_entries_regular(keys: dict[int, dict[int, str]], ranks: list[int],
                           agreed: list[tuple[int, str]], period: int) -> bool:
    last = agreed[-1][0]
    for r in ranks:
        for seq, key in keys[r].items():
            if seq > last and key != _expected(agreed, period, seq):
                return False
    return True
