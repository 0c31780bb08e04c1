"""Pure: the leader's decisions over the nodes' snapshots (no store, no clock read).

- When is the job quiet long enough to look? No node's job moved (no rank finished a step,
  printed or worked) for the threshold: ``--hang-timeout`` when given, else
  max(hang_min, K x p99 of the job's step times) once ``warmup`` steps are known.
- Which nodes are lost? A node whose beat has not changed for ``node_timeout`` seconds
  (measured on the leader's clock: node clocks are never compared).
- Which failure is the root cause? The first that is not fallout of another's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddpdoctor.jobview.snapshot import Failure, NodeSnap

HANG_MIN_S = 10.0  # no hang is declared on less quiet than this
HANG_K = 5.0  # x the job's p99 step time
WARMUP_STEPS = 5  # step times needed before the adaptive threshold applies
BEFORE_STEPS_S = 300.0  # startup, first compile, first batch: no step time known yet


@dataclass(frozen=True)
class Policy:
    fixed_s: float | None = None  # --hang-timeout given: the threshold, whatever the steps
    hang_min_s: float = HANG_MIN_S
    k: float = HANG_K
    warmup: int = WARMUP_STEPS
    before_steps_s: float = BEFORE_STEPS_S
    node_timeout_s: float = 15.0


def p99(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(0.99 * len(s)))] if s else 0.0


def threshold(step_times: list[float], policy: Policy) -> tuple[float, str]:
    """Seconds of job-wide quiet that make the leader look, and why that many."""
    if policy.fixed_s is not None:
        return policy.fixed_s, f"--hang-timeout {policy.fixed_s:g}"
    if len(step_times) < policy.warmup:
        return (max(policy.hang_min_s, policy.before_steps_s),
                f"{len(step_times)} step time(s) known, fewer than {policy.warmup}: "
                f"{max(policy.hang_min_s, policy.before_steps_s):g} s")
    q = p99(step_times)
    value = max(policy.hang_min_s, policy.k * q)
    return value, (f"max(--hang-min {policy.hang_min_s:g}, {policy.k:g} x p99 step "
                   f"{q:.2f} s) = {value:.1f} s")


@dataclass
class _Seen:
    beat: int
    progress: int
    beat_at: float
    moved_at: float


@dataclass
class ProgressClock:
    """The leader's memory of what each node last said, and when (its own clock)."""

    started: float
    nodes: dict[int, _Seen] = field(default_factory=dict)
    snaps: dict[int, NodeSnap] = field(default_factory=dict)
    last_move: float = 0.0

    def __post_init__(self) -> None:
        self.last_move = self.started

    def observe(self, snaps: list[NodeSnap], now: float) -> None:
        for s in snaps:
            seen = self.nodes.get(s.node)
            if seen is None:
                self.nodes[s.node] = _Seen(s.beat, s.progress, now, now)
                self.last_move = now
            else:
                if s.beat != seen.beat:
                    seen.beat, seen.beat_at = s.beat, now
                if s.progress != seen.progress:
                    seen.progress, seen.moved_at = s.progress, now
                    self.last_move = now
            self.snaps[s.node] = s

    def stalled_for(self, now: float) -> float:
        return max(0.0, now - self.last_move)

    def step_times(self) -> list[float]:
        return [t for s in self.snaps.values() for t in s.step_times]

    def rank_steps(self) -> dict[int, int]:
        """Each rank's last finished step, where its watch heartbeat says it."""
        return {r.rank: r.step for s in self.snaps.values() for r in s.ranks if r.step >= 0}

    def lost(self, now: float, timeout: float) -> list[NodeSnap]:
        """Nodes that stopped beating without saying their job ended."""
        return [self.snaps[n] for n, seen in sorted(self.nodes.items())
                if now - seen.beat_at >= timeout and not self.snaps[n].ended]

    def live(self, now: float, timeout: float) -> list[NodeSnap]:
        gone = {s.node for s in self.lost(now, timeout)}
        return [s for n, s in sorted(self.snaps.items()) if n not in gone and not s.ended]


@dataclass(frozen=True)
class LookDecision:
    look: bool
    stalled_s: float
    threshold_s: float
    how: str


def should_look(clock: ProgressClock, now: float, policy: Policy, busy: bool) -> LookDecision:
    """``busy``: a request is already out (one look at a time)."""
    limit, how = threshold(clock.step_times(), policy)
    stalled = clock.stalled_for(now)
    live = clock.live(now, policy.node_timeout_s)
    return LookDecision(bool(live) and not busy and stalled >= limit, stalled, limit, how)


def root_cause(failures: list[Failure]) -> Failure | None:
    """The first failure that is not another's fallout; else the first of all."""
    if not failures:
        return None
    ordered = sorted(failures, key=lambda f: f.at)
    return next((f for f in ordered if not f.fallout), ordered[0])


def lost_lines(lost: list[NodeSnap], now_seen: dict[int, float], now: float) -> list[str]:
    return [f"{s.host} (node {s.node}): no update for {now - now_seen.get(s.node, now):.0f} s"
            for s in lost]
