"""What a check may read and call: the typed context every WatchCheck hook receives.

The Watcher (watch/api.py) is the one implementation; checks depend on this protocol,
not on the watcher's internals. Findings and metrics leave only through ``emit``,
``emit_metrics`` and ``note`` (watch/stream.py). No torch here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from ddpdoctor.core.findings import Finding
from ddpdoctor.watch.config import WatchConfig
from ddpdoctor.watch.stream import EventStream, StepMetrics

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup
    from torch.nn.parallel import DistributedDataParallel

    from ddpdoctor.watch.first_grad import FirstGradient
    from ddpdoctor.watch.join import JoinTracker
    from ddpdoctor.watch.steps import StepCounter

# (step, step_s, data_s, forward_s, backward_s) of one timed step
TimedStep = tuple[int, float, float, float, float]


class Heartbeat(Protocol):
    """What checks use of the process's hang watchdog (watch/hang_watchdog.py Monitor),
    named here by its shape: the watchdog's module reaches the checks' (an import cycle)."""

    mem_history: list[tuple[int, int]]

    def memory(self, value: int) -> None: ...


class CheckContext(Protocol):
    # settings and who we are
    cfg: WatchConfig
    rank: int
    world: int
    # the model, learnt once (watch/introspect.py)
    model: torch.nn.Module
    ddp: DistributedDataParallel | None
    inner: torch.nn.Module
    wrapper: str
    named_params: list[tuple[str, torch.nn.Parameter]]
    named_buffers: list[tuple[str, torch.Tensor]]
    device: torch.device
    # training progress
    step: int
    loaders: list[object]
    first_grad: FirstGradient | None
    steps: StepCounter
    optimizer: torch.optim.Optimizer | None           # the one given to watch()
    stepping_optimizer: torch.optim.Optimizer | None  # the one whose step ended the last step
    join: JoinTracker        # steps this rank sat out in a Join

    # read-only here (properties): the watcher holds narrower types than checks need
    @property
    def monitor(self) -> Heartbeat: ...

    @property
    def checks(self) -> Sequence[object]: ...  # the WatchChecks (base.py imports this file)

    @property
    def window(self) -> deque[TimedStep]: ...  # timed steps only

    @property
    def group(self) -> ProcessGroup | None: ...  # the watch's gloo group; None: cross-rank off

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

    def unsubscribe(self, check: object, hook: str) -> None: ...
