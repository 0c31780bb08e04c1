"""What a check may read and call: the typed context every WatchCheck hook receives.

The Watcher (watch/api.py) is the one implementation; checks depend on this protocol,
not on the watcher's internals. Findings and metrics leave only through ``emit``,
``emit_metrics`` and ``note`` (watch/stream.py). No torch here.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

from ddpdoctor.findings import Finding
from ddpdoctor.watch.config import WatchConfig
from ddpdoctor.watch.stream import EventStream, StepMetrics


class CheckContext(Protocol):
    # settings and who we are
    cfg: WatchConfig
    rank: int
    world: int
    # the model, learnt once (watch/introspect.py)
    model: Any
    ddp: Any
    inner: Any
    wrapper: str
    named_params: list[tuple[str, Any]]
    named_buffers: list[tuple[str, Any]]
    device: Any
    # training progress
    step: int
    loaders: list[Any]
    first_grad: Any      # watch/first_grad.py FirstGradient, or None
    steps: Any           # watch/steps.py StepCounter
    monitor: Any         # watch/hang_watchdog.py Monitor
    checks: list[Any]
    optimizer: Any           # the optimizer given to watch(), or None
    stepping_optimizer: Any  # the one whose step ended the last step, or None
    join: Any                # watch/join.py JoinTracker: steps this rank sat out in a Join

    @property
    def window(self) -> deque: ...  # (step, step_s, data_s, forward_s, backward_s), timed

    @property
    def group(self) -> Any: ...           # the watch's gloo group, None when cross-rank is off

    @property
    def hosts(self) -> list[int]: ...     # per rank: host and network namespace id

    @property
    def sink(self) -> EventStream: ...

    def emit(self, finding: Finding, step: int) -> None: ...

    def emit_metrics(self, records: list[StepMetrics]) -> None: ...

    def note(self, name: str, value: float) -> None: ...

    def peer_groups(self, same_model: bool = False) -> list[list[int]]: ...

    def solo_groups(self, ranks: list[int]) -> str | None: ...  # never-reducing group

    def is_check_step(self, step: int) -> bool: ...

    def unsubscribe(self, check: Any, hook: str) -> None: ...
