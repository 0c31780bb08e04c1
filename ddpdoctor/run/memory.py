"""Each rank's memory (RSS) over time, read from outside, so a rank that the kernel's OOM
killer (or anything else) SIGKILLs leaves a history of its last climb.

Sampled about once a second from run's sampler; bounded: when a rank's series is full,
every other point is dropped and the interval doubles, so the series always spans the
whole run in at most ``max_points`` points.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddpdoctor.run.progress import TreeSample

_MB = 1 << 20


@dataclass
class RankMemory:
    points: list[tuple[float, float]] = field(default_factory=list)  # (s since start, MB)
    interval: float = 1.0
    last: float = float("-inf")


class MemoryHistory:
    def __init__(self, start: float, max_points: int = 120, interval: float = 1.0) -> None:
        self.start = start
        self.max_points = max(4, max_points)
        self.base_interval = interval
        self.ranks: dict[int, RankMemory] = {}

    def add(self, sample: TreeSample) -> None:
        """RSS of each rank's own process plus its workers', at ``sample.time``."""
        totals: dict[int, int] = {}
        for p in sample.procs:
            if p.rank is not None and not p.zombie:
                totals[p.rank] = totals.get(p.rank, 0) + p.rss
        for rank, rss in totals.items():
            m = self.ranks.setdefault(rank, RankMemory(interval=self.base_interval))
            if sample.time - m.last < m.interval * 0.9:
                continue
            m.last = sample.time
            m.points.append((round(sample.time - self.start, 1), round(rss / _MB, 1)))
            if len(m.points) > self.max_points:
                m.points = m.points[::2]
                m.interval *= 2

    def series(self, rank: int) -> list[tuple[float, float]]:
        m = self.ranks.get(rank)
        return list(m.points) if m else []

    def evidence(self, rank: int) -> dict | None:
        pts = self.series(rank)
        if not pts:
            return None
        return {"rss_mb_history": [[t, mb] for t, mb in pts],
                "rss_mb_first": pts[0][1], "rss_mb_last": pts[-1][1],
                "rss_mb_peak": max(mb for _, mb in pts),
                "source": "RSS of the rank and its workers, sampled by ddpdoctor run from "
                          "outside (t = seconds since the job started)"}
