"""Settings of ``ddpdoctor.watch()``: one dataclass, defaults that are cheap, env overrides.

Precedence: an explicit argument to ``watch()`` > an environment variable > the default.
Environment variables let ``ddpdoctor run`` (and the reference trainer) switch behaviour
without a code change. No torch here.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypedDict

from ddpdoctor.core import contract as C

CHECKS: tuple[str, ...] = (
    "unused", "nonfinite", "desync", "sampler", "straggler", "links", "memory", "device",
    "hang", "skipped",
)
# Checks whose data travels in the every-K-steps all_gather.
COLLECTIVE_CHECKS = frozenset({"nonfinite", "desync", "sampler", "straggler", "device",
                               "links"})


@dataclass
class WatchConfig:
    # collective checks every K optimizer steps: the cross-rank checks (checksums of every
    # parameter, grad norms, one all_gather) cost a few ms per check step; at 100 they add
    # ~0.2% to a 20 ms step (benchmarks/bench_watch_overhead.py; docs/benchmarks.md)
    every: int = 100
    # and early ones, so a short run (a smoke test) hears about NaN, a missing sampler or
    # desynced replicas in its first minutes: 2 extra check steps in all
    early_checks: tuple[int, ...] = (10, 50)
    checks: tuple[str, ...] = CHECKS
    events_path: str | None = None     # JSON lines; "{rank}" in the path is replaced
    warn: bool = True                  # emit Python warnings (DDPDoctorWarning)
    log: bool = True                   # emit log records on logger "ddpdoctor.watch"
    # unused parameters: watched during the first N steps (a param used later is fine)
    unused_steps: int = 3
    # straggler: a rank is slow when its local time (data + forward) exceeds the median
    # of its peers by max(abs, rel * median step time) in >= fraction of recent steps
    straggler_abs_s: float = 0.02
    straggler_rel: float = 0.25
    straggler_fraction: float = 0.6
    # at least this many slow steps: a loaded host left a healthy rank 0 behind by 30 ms
    # in 3 of a 4-step history (CI beside a 2-rank job); a straggler is slow step after
    # step, and a real job's check step sees straggler_samples of them
    straggler_min_steps: int = 5
    data_share: float = 0.3            # DATALOADER_BOTTLENECK above this share of a step
    # the steps timed for it: the last N before each check step (module forward hooks,
    # ~20 us a step each on a busy CPU, run on those steps only where the watch sees the
    # first gradient, i.e. DDP and plain modules; FSDP and TP models time every step)
    straggler_samples: int = 10
    # links (COMM_SLOW_RANK): on the first link_confirm check steps and then on every
    # link_every-th, link_bytes go round the ring both ways, best of link_reps; a link is
    # slow at link_factor x the median of the others and link_min_excess_s more (loopback
    # jitter on a busy host stays below both); reported once link_confirm probes agree
    link_bytes: int = 1 << 20
    link_reps: int = 3
    link_factor: float = 4.0
    link_min_excess_s: float = 0.005
    link_confirm: int = 2
    link_every: int = 10               # in check steps: 1000 optimizer steps by default
    link_timeout_s: float = 10.0       # a peer that never joins the probe: probes stop
    # nonfinite: also sum the model output every step, to tell a NaN made by the forward
    # from one made by the loss (one reduction over the output, an LLM's logits, per step;
    # FSDP and tensor-parallel models always work this way)
    nonfinite_output: bool = False
    # ... and GRAD_NONFINITE when this many iterations in a row skip their optimizer step
    # (fp16 GradScaler finding inf every time: its scale collapses, nothing trains)
    nonfinite_skips: int = 20
    # memory: growth over a window of steps after warm-up
    memory_warmup_steps: int = 2
    memory_window: int = 8             # samples
    # steps between samples (at most `every`): reading RSS costs ~35 us inside a training
    # loop here (1 us in a tight one), so a window of 8 covers 160 steps
    memory_every: int = 20
    memory_min_growth_mb: float = 64.0
    oom_history: bool = False          # CUDA: record allocation history (costly) for OOM
    # hang watchdog and heartbeat
    hang_timeout_s: float = 300.0
    heartbeat_dir: str | None = None
    heartbeat_interval_s: float = 1.0
    # Flight Recorder dump on a signal (for `ddpdoctor attach`) and stacks on another
    fr_dir: str | None = None
    fr_signal: str = "SIGUSR2"
    stacks_signal: str = "SIGUSR1"
    collective_timeout_s: float = 1800.0
    # Prometheus: serve this rank's metrics on metrics_port + LOCAL_RANK (one port per
    # rank of a host), on metrics_host only (loopback unless the user opens it)
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    # torch.profiler over optimizer steps START..START+STEPS-1 (`run --profile`)
    profile: tuple[int, int] | None = None
    extra: dict[str, object] = field(default_factory=dict)

    def enabled(self, check: str) -> bool:
        return check in self.checks

    def validate(self) -> None:
        unknown = [c for c in self.checks if c not in CHECKS]
        if unknown:
            raise ValueError(f"unknown watch checks {unknown}; choose from {', '.join(CHECKS)}")
        if self.every < 1:
            raise ValueError("every must be >= 1")
        if self.straggler_samples < 1:
            raise ValueError("straggler_samples must be >= 1")
        if self.link_confirm < 1 or self.link_every < 1:
            raise ValueError("link_confirm and link_every must be >= 1")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics_port must be 0..65535, not {self.metrics_port!r}")
        for name in ("hang_timeout_s", "heartbeat_interval_s", "collective_timeout_s",
                     "link_timeout_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, not {value!r}")


class ConfigSettings(TypedDict, total=False):
    """The keyword settings of ``watch()`` that have no parameter of their own there: the
    WatchConfig fields of the same names and types (keep the two in step)."""

    early_checks: tuple[int, ...]
    warn: bool
    log: bool
    unused_steps: int
    straggler_abs_s: float
    straggler_rel: float
    straggler_fraction: float
    straggler_min_steps: int
    data_share: float
    straggler_samples: int
    link_bytes: int
    link_reps: int
    link_factor: float
    link_min_excess_s: float
    link_confirm: int
    link_every: int
    link_timeout_s: float
    nonfinite_output: bool
    nonfinite_skips: int
    memory_warmup_steps: int
    memory_window: int
    memory_every: int
    memory_min_growth_mb: float
    oom_history: bool
    hang_timeout_s: float
    heartbeat_dir: str | None
    heartbeat_interval_s: float
    fr_dir: str | None
    fr_signal: str
    stacks_signal: str
    collective_timeout_s: float
    metrics_port: int | None
    metrics_host: str
    profile: tuple[int, int] | None
    extra: dict[str, object]


class WatchSettings(ConfigSettings, total=False):
    """Every ``watch()`` setting, as the integrations pass them on (``None``: not given)."""

    every: int | None
    checks: Iterable[str] | str | None
    events_path: str | None


def parse_checks(text: str, base: tuple[str, ...] = CHECKS) -> tuple[str, ...]:
    """``"all"``, ``"none"``, ``"unused,nonfinite"`` or ``"-memory,-hang"`` (all but those)."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items or items == ["all"]:
        return tuple(base)
    if items == ["none"]:
        return ()
    if all(i.startswith("-") for i in items):
        drop = {i[1:] for i in items}
        return tuple(c for c in base if c not in drop)
    return tuple(i.lstrip("+") for i in items)


def _flag(value: str) -> bool:
    return value.lower() not in ("0", "false", "no", "off")


def _count(value: str) -> int:
    n = int(value)
    if n < 1:
        raise ValueError("must be an integer >= 1")
    return n


def _checks(value: str) -> tuple[str, ...]:
    checks = parse_checks(value)
    unknown = [c for c in checks if c not in CHECKS]
    if unknown:
        raise ValueError(f"unknown watch checks {unknown}; choose from {', '.join(CHECKS)}")
    return checks


def _port(value: str) -> int:
    n = int(value)
    if not 0 <= n <= 65535:
        raise ValueError("must be a TCP port 0..65535")
    return n


def _window(value: str) -> tuple[int, int]:
    from ddpdoctor.core.profiled import parse_window

    return parse_window(value)


def _seconds(value: str) -> float:
    # float("nan") parses, and a NaN timeout compares false with everything: the
    # watchdog would silently never fire
    x = float(value)
    if not math.isfinite(x) or x <= 0:
        raise ValueError("must be a finite number of seconds > 0")
    return x


_ENV: dict[str, tuple[str, Callable[[str], object]]] = {
    C.WATCH_EVERY: ("every", _count),
    C.WATCH_CHECKS: ("checks", _checks),
    C.EVENTS: ("events_path", str),
    C.WATCH_LINK_EVERY: ("link_every", _count),
    C.HANG_TIMEOUT: ("hang_timeout_s", _seconds),
    C.HEARTBEAT_DIR: ("heartbeat_dir", str),
    C.FR_DIR: ("fr_dir", str),
    C.WATCH_WARN: ("warn", _flag),
    C.WATCH_NONFINITE_OUTPUT: ("nonfinite_output", _flag),
    C.METRICS_PORT: ("metrics_port", _port),  # set by `ddpdoctor run --metrics-port`
    C.METRICS_HOST: ("metrics_host", str),
    C.PROFILE: ("profile", _window),  # set by `ddpdoctor run --profile`
}


def from_env(env: Mapping[str, str] | None = None, **overrides: Any) -> WatchConfig:
    """Defaults, then the environment, then ``overrides`` (the ``watch()`` arguments that
    were given; ``None`` means "not given")."""
    env = os.environ if env is None else env
    # Any: each value goes to the WatchConfig field of its name, whatever that field's type
    values: dict[str, Any] = {}
    for var, (name, conv) in _ENV.items():
        raw = env.get(var)
        if raw not in (None, ""):
            try:
                values[name] = conv(raw)
            except ValueError as e:
                raise ValueError(f"bad {var}={raw!r}: {e}") from None
    known = {f.name for f in fields(WatchConfig)}
    for k, v in overrides.items():
        if v is None:
            continue
        if k not in known:
            raise TypeError(f"watch() got an unexpected setting {k!r}")
        if k == "checks" and isinstance(v, str):
            v = parse_checks(v)
        values[k] = tuple(v) if k == "checks" else v
    cfg = replace(WatchConfig(), **values)
    cfg.validate()
    return cfg
