"""Pure scaling analysis: measurements at several world sizes -> efficiency, where each
step's time went, and a finding naming the cause where efficiency is poor.

Where the time goes, per world size (medians over the measured steps). In synchronous data
parallelism every rank meets the others in the gradient all-reduce, so the job's step is:

    step = typical rank's (data wait + forward)      "data", "compute"
         + the slowest rank's extra local time      "straggler" (waited for by the others)
         + the rest: backward, gradient communication not hidden by it, optimizer   "after"

Per-rank data wait and forward time are measured (the trainer gathers them every step).
The rest is split with the baseline (the smallest world, normally 1 rank, which has no
communication to wait for): backward + optimizer take the baseline's time scaled by how
much slower this world's forward is; what "after" holds beyond that is communication. The
split is an estimate and is labelled so; the efficiency and the measured parts are not.

Efficiency = throughput(W) / (throughput(base) x W / base). The time lost per step against
the ideal is divided between communication, data, straggler and compute (per-rank compute
slower than the baseline's: more ranks than cores or GPUs, shared memory bandwidth, or in
strong scaling a per-rank batch too small to fill the device). The largest share, when
it explains at least a third of the loss, is the cause.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from ddpdoctor.core.findings import Finding
from ddpdoctor.scale.measure import RunMeasurement

CAUSE_FINDING = {
    "communication": "SCALING_COMM_BOUND",
    "data": "DATALOADER_BOTTLENECK",
    "straggler": "STRAGGLER",
    "compute": "SCALING_COMPUTE_BOUND",
}
UNEXPLAINED = "SCALING_INEFFICIENT"


@dataclass(frozen=True)
class Thresholds:
    min_efficiency: float = 0.8   # below: a finding
    culprit_fraction: float = 0.6  # a rank slowest in at least this share of the steps ...
    culprit_abs_s: float = 0.02    # ... by at least this much ...
    culprit_rel: float = 0.10      # ... and this share of the step
    cause_share: float = 1 / 3     # the largest component must explain this much of the loss


@dataclass(frozen=True)
class Culprit:
    rank: int
    slowest_share: float  # fraction of the steps where it was the slowest rank
    excess_s: float       # its data + forward time beyond its peers' median
    data_excess_s: float  # of which data wait

    @property
    def by_data(self) -> bool:
        return self.data_excess_s > 0.5 * self.excess_s


@dataclass
class Breakdown:
    """Medians over the measured steps, seconds; None where per-rank times are missing."""

    step_s: float
    data_s: float | None = None
    compute_s: float | None = None
    straggler_s: float | None = None
    after_s: float | None = None
    culprit: Culprit | None = None


@dataclass
class WorldResult:
    world: int
    throughput: float
    efficiency: float
    breakdown: Breakdown
    ideal_step_s: float
    backward_s: float | None = None   # estimated: backward + optimizer
    comm_s: float | None = None       # estimated: communication not hidden by backward
    components: dict[str, float] = field(default_factory=dict)  # lost time by cause
    cause: str | None = None
    oversubscribed: bool = False      # more ranks than CPU cores (CPU runs)

    @property
    def lost_s(self) -> float:
        return max(0.0, self.breakdown.step_s - self.ideal_step_s)

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["lost_s"] = self.lost_s
        return {k: _rounded(v) for k, v in d.items()}


def _rounded(obj: object) -> object:
    if isinstance(obj, float):
        return round(obj, 5)
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    return obj


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def find_culprit(m: RunMeasurement, th: Thresholds) -> Culprit | None:
    """The rank that is the slowest (data + forward) in most steps by a clear margin."""
    if m.world < 2 or not m.timed:
        return None
    locals_ = [[d + c for d, c in zip(s.data_s, s.compute_s)] for s in m.steps]
    slowest = [max(range(m.world), key=row.__getitem__) for row in locals_]
    rank = statistics.mode(slowest)
    share = slowest.count(rank) / len(slowest)
    excess, dexcess = [], []
    for s, row in zip(m.steps, locals_):
        peers = [r for r in range(m.world) if r != rank]
        excess.append(row[rank] - _median([row[r] for r in peers]))
        dexcess.append(s.data_s[rank] - _median([s.data_s[r] for r in peers]))
    step = _median([s.step_s for s in m.steps])
    ex = _median(excess)
    if share < th.culprit_fraction or ex < max(th.culprit_abs_s, th.culprit_rel * step):
        return None
    return Culprit(rank, round(share, 3), ex, _median(dexcess))


def breakdown(m: RunMeasurement, th: Thresholds) -> Breakdown:
    step = _median([s.step_s for s in m.steps]) if m.steps else 0.0
    if not m.timed:
        return Breakdown(step)
    data, comp, strag, after = [], [], [], []
    for s in m.steps:
        local = [d + c for d, c in zip(s.data_s, s.compute_s)]
        slow = max(range(m.world), key=local.__getitem__)
        peers = [r for r in range(m.world) if r != slow] or [slow]
        data.append(_median([s.data_s[r] for r in peers]))
        comp.append(_median([s.compute_s[r] for r in peers]))
        strag.append(local[slow] - _median([local[r] for r in peers]))
        after.append(max(0.0, s.step_s - local[slow]))
    return Breakdown(step, _median(data), _median(comp), _median(strag), _median(after),
                     find_culprit(m, th))


def _throughput(m: RunMeasurement) -> float:
    return _median(m.throughput)


def _split(res: WorldResult, base: WorldResult, ratio: float) -> None:
    """Fill the estimated backward/communication split and the lost time by cause."""
    b, b0 = res.breakdown, base.breakdown
    if None in (b.compute_s, b0.compute_s, b.after_s, b0.after_s) or not b0.compute_s:
        return
    slowdown = b.compute_s / b0.compute_s  # type: ignore[operator]
    res.backward_s = b0.after_s * slowdown  # type: ignore[operator]
    res.comm_s = max(0.0, b.after_s - res.backward_s)  # type: ignore[operator]
    base_comm = base.comm_s or 0.0
    work0 = b0.compute_s + b0.after_s - base_comm  # type: ignore[operator]
    comp = {
        "communication": res.comm_s - base_comm,
        "data": b.data_s - b0.data_s * ratio,  # type: ignore[operator]
        "compute": b.compute_s + res.backward_s - work0 * ratio,  # type: ignore[operator]
        "straggler": 0.0,
    }
    extra = (b.straggler_s or 0.0) - (b0.straggler_s or 0.0)
    if b.culprit is None:
        comp["compute"] += extra  # uneven ranks with no steady culprit: scheduler noise
    elif b.culprit.by_data:
        comp["data"] += extra
    else:
        comp["straggler"] += extra
    comp = {k: max(0.0, v) for k, v in comp.items()}
    comp["other"] = res.lost_s - sum(comp.values())
    res.components = comp


def _cause(res: WorldResult, th: Thresholds) -> str | None:
    parts = {k: v for k, v in res.components.items() if k != "other"}
    if not parts or res.lost_s <= 0:
        return None
    top = max(parts, key=parts.__getitem__)
    return top if parts[top] >= th.cause_share * res.lost_s else None


def analyze(runs: list[RunMeasurement], th: Thresholds | None = None,
            cpus: int | None = None, device: str | None = None) -> list[WorldResult]:
    """Per-world results, smallest world first; the smallest is the baseline.

    ``cpus``/``device``: on CPU, a world with more ranks than cores is oversubscribed;
    its cause is compute whatever the split says (ranks wait for a core in every phase,
    and most visibly in a ring all-reduce, which needs every rank on a core at once).
    A planted straggler or slow data on one rank still names that rank.
    """
    th = th or Thresholds()
    runs = sorted(runs, key=lambda m: m.world)
    if not runs:
        return []
    base_m = runs[0]
    t0 = _throughput(base_m)
    out: list[WorldResult] = []
    for m in runs:
        bd = breakdown(m, th)
        eff = _throughput(m) / (t0 * m.world / base_m.world) if t0 > 0 else 0.0
        res = WorldResult(m.world, _throughput(m), eff, bd, bd.step_s * eff)
        if out:
            base = out[0]
            ratio = res.ideal_step_s / base.breakdown.step_s if base.breakdown.step_s else 1.0
            _split(res, base, ratio)
            res.cause = _cause(res, th)
            res.oversubscribed = bool(cpus and device == "cpu" and m.world > cpus)
            if res.oversubscribed and res.cause not in ("straggler", "data"):
                res.cause = "compute"
        else:
            _split(res, res, 1.0)
            res.components = {}
        out.append(res)
    return out


_WHY = {
    "communication": "the lost time is spent waiting for gradient communication",
    "data": "the lost time is spent waiting for data",
    "straggler": "the lost time is spent waiting for one slow rank",
    "compute": "each rank computes slower than the single rank did",
}


def _title(fid: str, group: list[WorldResult], ranks: list[int]) -> str:
    effs = ", ".join(f"{r.efficiency:.0%} at {r.world} ranks" for r in group)
    cause = group[0].cause
    if fid == "STRAGGLER" and ranks:
        c = group[0].breakdown.culprit
        why = (f"rank {ranks[0]} is slower than its peers before every gradient sync"
               + (f" (+{c.excess_s:.3f} s of compute per step)" if c else ""))
    elif fid == "DATALOADER_BOTTLENECK" and ranks:
        c = group[0].breakdown.culprit
        why = (f"rank {ranks[0]} waits for its data and the others wait for it"
               + (f" (+{c.data_excess_s:.3f} s per step)" if c else ""))
    elif cause:
        why = _WHY[cause]
    else:
        why = "no single cause explains a third of the lost time" \
            if group[0].components else "the run reported no per-rank times to say why"
    return f"scaling efficiency {effs}: {why}"


def _finding_key(res: WorldResult) -> tuple[str, tuple[int, ...]]:
    fid = CAUSE_FINDING.get(res.cause or "", UNEXPLAINED)
    c = res.breakdown.culprit
    ranks = (c.rank,) if c and res.cause in ("straggler", "data") and \
        (c.by_data == (res.cause == "data")) else ()
    return fid, ranks


def findings(results: list[WorldResult], mode: str, th: Thresholds | None = None,
             cpus: int | None = None) -> list[Finding]:
    """One finding per (cause, culprit) over the world sizes whose efficiency is poor."""
    th = th or Thresholds()
    groups: dict[tuple[str, tuple[int, ...]], list[WorldResult]] = {}
    for res in results[1:]:
        if res.efficiency < th.min_efficiency:
            groups.setdefault(_finding_key(res), []).append(res)
    out = []
    base = results[0].world if results else 1
    for (fid, ranks), group in groups.items():
        ev: dict[str, object] = {
            "mode": mode, "baseline_world": base, "min_efficiency": th.min_efficiency,
            "per_world": {str(r.world): {"efficiency": round(r.efficiency, 3),
                                         "throughput": round(r.throughput, 1),
                                         "step_s": round(r.breakdown.step_s, 4),
                                         "ideal_step_s": round(r.ideal_step_s, 4),
                                         "lost_s_by_cause": _rounded(r.components)}
                          for r in group}}
        over = [r.world for r in group if r.oversubscribed]
        if over:
            ev["oversubscribed"] = (f"{', '.join(map(str, over))} ranks on {cpus} CPU cores: "
                                    "every rank waits for a core, in compute and in "
                                    "communication alike")
        out.append(Finding(fid, _title(fid, group, list(ranks)), ranks=list(ranks),
                           evidence=ev))
    return out
