"""What a launch returns: per-rank outcomes, and the progress marks ranks leave in the store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ddpdoctor.core.contract import PROGRESS_KEY

if TYPE_CHECKING:
    from torch.distributed import Store

STATUS_OK = "ok"
STATUS_ERROR = "error"          # the function raised
STATUS_DIED = "died"            # the process exited without a result (signal, os._exit)
STATUS_TIMEOUT = "timeout"      # still running at the deadline, killed by the launcher
STATUS_TORN_DOWN = "torn_down"  # killed because another rank failed first


@dataclass
class RankContext:
    """What a launched function receives on each rank."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: str
    deadline_s: float
    store: Store | None = None  # shared by all ranks and the launcher
    # Set by a pre-init probe that proved the process group cannot form (a pair of ranks
    # that cannot connect makes gloo's full-mesh init hang until the deadline): the reason.
    skip_init: str = ""
    _progress: int = 0

    def progress(self, label: str) -> None:
        """Record that this rank reached ``label``; the launcher reads it at the deadline."""
        self._progress += 1
        if self.store is not None:
            self.store.set(PROGRESS_KEY.format(rank=self.rank), f"{self._progress}:{label}")


@dataclass
class RankOutcome:
    rank: int
    status: str
    value: object = None
    error: str = ""           # one line
    traceback: str = ""
    exitcode: int | None = None
    pid: int | None = None
    pre: object = None        # what ``pre_init`` returned, kept even when the rank failed
    progress: int = 0         # how many progress marks this rank reached
    last_step: str = ""       # the label of its last progress mark
    stderr_tail: list[str] = field(default_factory=list)
    # What the launcher saw of the process at the deadline: its state ("stopped",
    # "sleeping", ...) and descendants (DataLoader workers) that were stopped.
    process_state: str = ""
    stopped_children: list[int] = field(default_factory=list)

    @property
    def frozen(self) -> bool:
        """Stopped itself, or waiting on a stopped child: it cannot make progress."""
        return self.process_state == "stopped" or bool(self.stopped_children)


@dataclass
class LaunchResult:
    world_size: int
    backend: str
    deadline_s: float
    elapsed_s: float
    outcomes: list[RankOutcome]
    log_dir: str = ""
    store_address: str = ""  # where the launcher's rendezvous store listened

    @property
    def ok(self) -> bool:
        return all(o.status == STATUS_OK for o in self.outcomes)

    def values(self) -> dict[int, object]:
        return {o.rank: o.value for o in self.outcomes if o.status == STATUS_OK}

    def by_status(self, status: str) -> list[int]:
        return [o.rank for o in self.outcomes if o.status == status]

    def culprits(self) -> list[int]:
        """Ranks where the failure started.

        Ranks that raised or died come first. Otherwise, among ranks killed at the deadline,
        those seen stopped (or waiting on a stopped child), then those that reached the
        fewest progress marks: a rank that never entered the collective the others wait in
        is behind them.
        """
        failed = [o.rank for o in self.outcomes if o.status in (STATUS_ERROR, STATUS_DIED)]
        if failed:
            return failed
        stuck = [o for o in self.outcomes if o.status == STATUS_TIMEOUT]
        if not stuck:
            return []
        frozen = [o.rank for o in stuck if o.frozen]
        if frozen:
            return frozen
        least = min(o.progress for o in stuck)
        return [o.rank for o in stuck if o.progress == least]



def read_progress(store: Store, rank: int) -> tuple[int, str]:
    """(marks reached, last label) of ``rank``; (0, "") when it left none."""
    key = PROGRESS_KEY.format(rank=rank)
    try:
        if not store.check([key]):
            return 0, ""
        count, _, label = store.get(key).decode().partition(":")
        return int(count), label
    except Exception:  # the store is best effort evidence, never a reason to fail
        return 0, ""

