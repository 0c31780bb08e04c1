"""STRAGGLER / DATALOADER_BOTTLENECK: per-rank step, data-wait and forward times.

In synchronous data parallelism every rank's *step* takes as long as the slowest one's
(they meet in the gradient all-reduce), so the step time cannot name the culprit. What
differs is each rank's *local* time before it joins the others: data wait + forward +
its own backward compute (first gradient to last: under DDP the all-reduce overlaps the
backward, so a rank slow there makes every rank's step slow and hides among them).
Those ride in the all_gather (K values each); the reporter keeps a short history and
names a rank whose local time exceeds the median of its peers' by a margin in most
recent steps. With two ranks a median/MAD score cannot pick a side, so the comparison is
always against the peers' median, with an absolute and a relative floor.

A straggler's most common cause under ``torch.compile`` is its own recompiling (a shape
that changes on that rank only, with ``dynamic=False``; a guard that fails every step):
each rank also sends how many frames dynamo compiled and the seconds it spent compiling
(dynamo's own counters, read only where dynamo is already imported), and a straggler that
compiled more than every peer since the last check step is said to be recompiling.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import deque
from typing import TYPE_CHECKING

from ddpdoctor.core.findings import Finding
from ddpdoctor.watch.base import WatchCheck
from ddpdoctor.watch.stream import StepMetrics

if TYPE_CHECKING:
    import torch

    from ddpdoctor.watch.context import CheckContext

Times = tuple[float, float, float, float]  # (step_s, data_s, forward_s, backward_s)
COLS = 4


def _excess(times: dict[int, list[Times]], r: int, n: int, abs_s: float,
            rel: float) -> tuple[int, list[float], list[float]]:
    """Rank ``r`` over the last ``n`` aligned steps: how many exceed the threshold, and
    per step its local (data + forward) and data time over its peers' medians."""
    ranks = sorted(times)
    over, excess, dexcess = 0, [], []
    for j in range(n):
        step_med = statistics.median(times[q][-n + j][0] for q in ranks)
        thr = max(abs_s, rel * step_med)
        mine = times[r][-n + j]
        peers = [times[q][-n + j] for q in ranks if q != r]
        e = sum(mine[1:]) - statistics.median(sum(p[1:]) for p in peers)
        excess.append(e)
        dexcess.append(mine[1] - statistics.median(p[1] for p in peers))
        over += e > thr
    return over, excess, dexcess


def scores(times: dict[int, list[Times]]) -> dict[int, float]:
    """Per rank, the median of its local time over its peers' (seconds; the straggler
    score metric). Empty with fewer than two ranks or no aligned step."""
    n = min((len(v) for v in times.values()), default=0)
    if len(times) < 2 or n < 1:
        return {}
    return {r: statistics.median(_excess(times, r, n, 0.0, 0.0)[1]) for r in sorted(times)}


def _backward_excess(times: dict[int, list[Times]], r: int, n: int) -> float:
    """Median over the last ``n`` steps of rank ``r``'s backward time over its peers'."""
    def bwd(t: tuple[float, ...]) -> float:
        return t[3] if len(t) > 3 else 0.0  # untimed (FSDP, TP: no first-gradient hooks)

    peers = [q for q in times if q != r]
    return statistics.median(
        bwd(times[r][-n + j]) - statistics.median(bwd(times[q][-n + j]) for q in peers)
        for j in range(n))


def _slow(times: dict[int, list[Times]], n: int, abs_s: float, rel: float,
          fraction: float, min_steps: int) -> dict[int, dict]:
    slow: dict[int, dict] = {}
    for r in sorted(times):
        over, excess, dexcess = _excess(times, r, n, abs_s, rel)
        # at least ``min_steps`` slow steps, whatever the fraction: on a loaded host the
        # scheduler leaves a rank behind by 20+ ms now and then (two of a 3-step history,
        # seen beside another job); a straggler is slow step after step
        if over >= max(min_steps, fraction * n):
            slow[r] = {"slow_by_s": round(statistics.median(excess), 4),
                       "data_slow_by_s": round(statistics.median(dexcess), 4),
                       "backward_slow_by_s": round(_backward_excess(times, r, n), 4),
                       "steps_slow": over, "steps": n}
    return slow


def _waiting(times: dict[int, list[Times]], n: int, timed: set[int], by_data: list[int],
             abs_s: float, data_share: float) -> tuple[list[int], dict[int, float]]:
    """Ranks that wait for data: slow by data, or a data share above ``data_share``."""
    shares = {r: statistics.median(t[1] / t[0] if t[0] > 0 else 0.0 for t in times[r][-n:])
              for r in times}
    heavy = {r for r in times if r in timed and shares[r] > data_share
             and statistics.median(t[1] for t in times[r][-n:]) > abs_s}
    return sorted(set(by_data) | heavy), shares


def slow_ranks(times: dict[int, list[Times]], abs_s: float, rel: float, fraction: float,
               min_steps: int, data_share: float,
               loader_timed: set[int] | None = None) -> list[tuple[str, list[int], dict]]:
    """``times[rank]``: aligned per-step samples -> [(finding id, ranks, evidence)].

    ``loader_timed``: ranks whose data time was measured inside the DataLoader (else it is
    the gap between steps, which also holds logging and evaluation: such ranks can be
    stragglers, but are not blamed on data). None: all ranks were.
    """
    timed = set(times) if loader_timed is None else loader_timed
    ranks = sorted(times)
    n = min((len(v) for v in times.values()), default=0)
    if len(ranks) < 2 or n < min_steps:
        return []
    out: list[tuple[str, list[int], dict]] = []
    slow = _slow(times, n, abs_s, rel, fraction, min_steps)
    by_data = [r for r, e in slow.items()
               if r in timed and e["data_slow_by_s"] > 0.5 * e["slow_by_s"]]
    by_compute = [r for r in slow if r not in by_data]
    median_step = statistics.median(t[0] for r in ranks for t in times[r][-n:])
    if by_compute:
        out.append(("STRAGGLER", by_compute,
                    {"per_rank": {str(r): slow[r] for r in by_compute},
                     "median_step_s": round(median_step, 4)}))
    waiting, shares = _waiting(times, n, timed, by_data, abs_s, data_share)
    if waiting:
        out.append(("DATALOADER_BOTTLENECK", waiting,
                    {"data_share": {str(r): round(shares[r], 3) for r in waiting},
                     "per_rank": {str(r): slow[r] for r in waiting if r in slow},
                     "median_step_s": round(median_step, 4)}))
    return out


def _mean(xs: list[float]) -> float | None:
    xs = [x for x in xs if math.isfinite(x)]
    return sum(xs) / len(xs) if xs else None


def rank_metrics(step: int, times: dict[int, list[Times]], last: int) -> list[StepMetrics]:
    """Every rank's means over its ``last`` newest samples and its straggler score: the
    per-rank metrics rank 0 publishes at a check step."""
    score = scores({r: t[-last:] for r, t in times.items() if t})
    out = []
    for r, t in sorted(times.items()):
        recent = t[-last:]
        if not recent:
            continue
        out.append(StepMetrics(r, step, "check", len(recent),
                               step_time_s=_mean([x[0] for x in recent]),
                               data_wait_s=_mean([x[1] for x in recent]),
                               compute_s=_mean([x[2] for x in recent]),
                               straggler_score_s=score.get(r)))
    return out


def _where_slow(per_rank: dict[str, dict], ranks: list[int]) -> str:
    """A straggler whose extra time is mostly its own backward is said to be slow there:
    hidden inside DDP's overlapped all-reduce, it is what users ask every tracer for."""
    if all(per_rank[str(r)]["backward_slow_by_s"] > 0.5 * per_rank[str(r)]["slow_by_s"]
           for r in ranks):
        return ("is slower than its peers in its own backward (DDP's all-reduce overlaps "
                "the backward: every rank's step waits for it)")
    return "is slower than its peers before every all-reduce"


def compile_stats() -> tuple[int, float]:
    """(frames dynamo compiled, seconds compiling) in this process so far; (0, 0.0) where
    dynamo was never imported (it is not imported here)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return 0, 0.0
    try:
        frames = int(utils.counters["frames"]["total"])
        seconds = float(sum(utils.compilation_time_metrics.get("_compile.compile_inner", ())))
    except Exception:  # private counters move between releases
        return 0, 0.0
    return frames, seconds


def recompiling(rank: int, group: list[int], compiles: dict[int, int],
                seconds: dict[int, float]) -> dict | None:
    """Evidence that ``rank`` straggles because it recompiles: it compiled at least twice
    since the last check step, more than every peer."""
    mine = compiles.get(rank, 0)
    peers = [compiles.get(r, 0) for r in group if r != rank]
    if mine < 2 or (peers and mine <= max(peers)):
        return None
    return {"compiles_since_last_check": {str(r): compiles.get(r, 0) for r in group},
            "compile_s_since_last_check": {str(r): round(seconds.get(r, 0.0), 3)
                                           for r in group},
            "how_to_see_why": "TORCH_LOGS=recompiles names the guard that failed on each "
                              "recompile (a shape with dynamic=False, a Python value)"}


class StragglerCheck(WatchCheck):
    name = "straggler"

    def attach(self, w: CheckContext) -> None:
        self.k = w.cfg.every
        self.width = 4 + COLS * self.k  # count, loaders, 4 x k times, compiles, compile s
        self.compiled: dict[int, tuple[float, float]] = {}  # per rank: the last totals
        self.history: dict[int, deque] = {}
        self.warmup = 1  # step 1 carries one-time costs (bucket building, lazy init)
        self.sent = 0  # the last step whose times were packed

    def pack(self, w: CheckContext, step: int) -> torch.Tensor:
        import torch

        # the steps since the last check step (check steps are not evenly spaced)
        window = [t for t in w.window if t[0] > max(self.warmup, self.sent)][-self.k:]
        self.sent = step
        pad = [float("nan")] * (self.k - len(window))
        # One tensor from one list: element-wise writes cost ~4 us each, 300 per check.
        values = [float(len(window)), float(bool(w.loaders))]
        for col in range(1, COLS + 1):
            values += [t[col] if len(t) > col else 0.0 for t in window] + pad
        frames, seconds = compile_stats()
        values += [float(frames), seconds]
        return torch.tensor(values, dtype=torch.float64)

    def _compiles(self, data: list[list[float]]) -> tuple[dict[int, int], dict[int, float]]:
        """Per rank: frames compiled and seconds compiling since the last check step."""
        frames, seconds = {}, {}
        for r, row in enumerate(data):
            now = (row[2 + COLS * self.k], row[3 + COLS * self.k])
            before = self.compiled.get(r, (0.0, 0.0))
            frames[r], seconds[r] = int(now[0] - before[0]), now[1] - before[1]
            self.compiled[r] = now
        return frames, seconds

    def analyze(self, w: CheckContext, step: int, rows: torch.Tensor) -> list[Finding]:
        keep = max(self.k, 16)
        data = rows.tolist()
        timed = {r for r, row in enumerate(data) if row[1] > 0}
        fresh = 0
        for r, row in enumerate(data):
            cnt = int(row[0])
            fresh = max(fresh, cnt)
            h = self.history.setdefault(r, deque(maxlen=keep))
            for j in range(cnt):
                h.append(tuple(row[2 + c * self.k + j] for c in range(COLS)))
        cfg = w.cfg
        findings = []
        compiles, compile_s = self._compiles(data)
        for group in w.peer_groups():
            times = {r: list(self.history.get(r, ())) for r in group}
            if fresh:
                w.emit_metrics(rank_metrics(step, times, fresh))
            for fid, ranks, ev in slow_ranks(times, cfg.straggler_abs_s, cfg.straggler_rel,
                                             cfg.straggler_fraction, cfg.straggler_min_steps,
                                             cfg.data_share, timed):
                what = ("waits for data" if fid == "DATALOADER_BOTTLENECK"
                        else _where_slow(ev["per_rank"], ranks))
                cause = (recompiling(ranks[0], group, compiles, compile_s)
                         if fid == "STRAGGLER" and len(ranks) == 1 else None)
                if cause is not None:
                    n, secs = compiles[ranks[0]], compile_s[ranks[0]]
                    what += (f": it is recompiling (torch.compile: {n} frames compiled "
                             f"since the last check step, {secs:.1f} s compiling)")
                    ev = {**ev, "cause": "recompiling", **cause}
                findings.append(Finding(
                    fid, f"rank {','.join(map(str, ranks))} {what}", ranks=ranks,
                    evidence={"step": step, **ev}))
        return findings
