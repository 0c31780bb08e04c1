"""The launched processes as the launcher watches them: the tree, the wait, the kill."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ddpdoctor.check.launcher.outcome import read_progress
from ddpdoctor.core.contract import RANK_RESULT_FILE

if TYPE_CHECKING:
    from collections.abc import Callable

    import psutil
    from torch.distributed import Store
    from torch.distributed.elastic.multiprocessing.api import PContext, RunProcsResult

CLOSE_TIMEOUT_S = 5.0  # torch's own cleanup, after the launcher's kill
EXIT_GRACE_S = 5.0  # every rank has answered: how long their processes get to exit


class RankTree:
    """The rank processes and every process they started, as seen while they ran.

    Descendants are remembered (psutil.Process keeps the create time, so a reused pid is
    never signalled): a DataLoader worker orphaned by its rank's death is still killed.
    """

    def __init__(self, pids: dict[int, int]) -> None:
        import psutil

        self.ranks: dict[int, psutil.Process] = {}
        for r, pid in pids.items():
            with contextlib.suppress(psutil.Error):
                self.ranks[r] = psutil.Process(pid)
        self.children: dict[int, dict[int, psutil.Process]] = {r: {} for r in self.ranks}

    def refresh(self) -> None:
        import psutil

        for r, proc in self.ranks.items():
            with contextlib.suppress(psutil.Error):
                for c in proc.children(recursive=True):
                    self.children[r].setdefault(c.pid, c)

    def states(self) -> dict[int, tuple[str, list[int]]]:
        """rank -> (its process state, pids of its stopped descendants)."""
        import psutil

        out = {}
        for r, proc in self.ranks.items():
            try:
                state = proc.status() if proc.is_running() else "gone"
            except psutil.Error:
                state = "gone"
            stopped = []
            for pid, c in self.children[r].items():
                with contextlib.suppress(psutil.Error):
                    if c.is_running() and c.status() in (psutil.STATUS_STOPPED,
                                                         psutil.STATUS_TRACING_STOP):
                        stopped.append(pid)
            out[r] = (state, sorted(stopped))
        return out

    def kill(self) -> None:
        """SIGKILL every descendant, then the ranks (SIGKILL also ends a stopped process)."""
        import psutil

        self.refresh()
        everyone = [c for kids in self.children.values() for c in kids.values()]
        for proc in everyone + list(self.ranks.values()):
            with contextlib.suppress(psutil.Error):
                if proc.is_running():
                    proc.kill()



def tail(path: Path, lines: int = 20) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [ln for ln in text.splitlines() if ln.strip()][-lines:]



class Waiter(threading.Thread):
    """torch's ``pc.wait`` in a thread of its own: it is not bounded (once every
    entrypoint has returned it blocks until every process exits, forever if one cannot,
    e.g. a teardown joining a stopped DataLoader worker), so the launcher keeps the time."""

    def __init__(self, pc: PContext, deadline_s: float) -> None:
        super().__init__(name="ddpdoctor-launcher-wait", daemon=True)
        self.pc, self.deadline_s = pc, deadline_s
        self.run_result: RunProcsResult | None = None
        self.start()

    def run(self) -> None:
        with contextlib.suppress(Exception):  # the outcomes are read from the result files
            self.run_result = self.pc.wait(timeout=self.deadline_s + 1, period=0.1)


def watch(waiter: Waiter, tree: RankTree, nproc: int, deadline_s: float, started: float,
           store: Store, result_dir: Path,
           on_progress: Callable[[dict[int, str]], None] | None
           ) -> tuple[RunProcsResult | None, bool]:
    """Wait for the ranks until the deadline; returns (torch's result, or None when it did
    not come, and whether every rank has written its answer)."""
    answered_at: float | None = None
    while waiter.is_alive():
        remaining = deadline_s - (time.monotonic() - started)
        if remaining <= 0:
            break
        if answered_at is None and all((result_dir / RANK_RESULT_FILE.format(rank=r)).exists()
                                       for r in range(nproc)):
            answered_at = time.monotonic()
        elif answered_at is not None and time.monotonic() - answered_at > EXIT_GRACE_S:
            break  # every rank answered but some process cannot exit: end it now
        tree.refresh()
        waiter.join(min(0.5, remaining))
        if waiter.is_alive() and on_progress is not None:
            on_progress({r: read_progress(store, r)[1] for r in range(nproc)})
    if waiter.is_alive():
        return None, answered_at is not None
    return waiter.run_result, True



def close_bounded(pc: PContext, tree: RankTree) -> None:
    """torch's own cleanup (reaping, log files), given a few seconds and no more.

    Its waits are not all bounded; whatever it has not ended by then is SIGKILLed here,
    descendants included (a DataLoader worker left behind by a finished rank).
    """
    closer = threading.Thread(target=pc.close, kwargs={"death_sig": signal.SIGTERM,
                                                         "timeout": 2},
                              name="ddpdoctor-launcher-close", daemon=True)
    closer.start()
    closer.join(CLOSE_TIMEOUT_S)
    tree.kill()
    if closer.is_alive():
        closer.join(1.0)

