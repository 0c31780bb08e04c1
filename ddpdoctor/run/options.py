"""What ``ddpdoctor run`` was asked to do: the options the supervision loop reads.

A module of its own (runner.py re-exports it): the loop and the report take these by
type, and runner imports both. The job view's Endpoint is named through run/jobnode.py,
run's one glue to jobview (the package layers, tests/unit/test_layers.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddpdoctor.run.jobnode import Endpoint


@dataclass(frozen=True)
class RunOptions:
    """Frozen: the loop never rewrites what it was asked. The adaptive hang threshold is
    the one value that moves: the loop holds it as ``replace(opts, hang_timeout=...)``
    (its own copy) and the report reads the last one from ``RunResult.options``."""

    # the quiet that makes run look; with hang_fixed False it adapts to the job's step
    # times (jobview/leader.threshold) and the loop's copy holds the current value
    hang_timeout: float = 300.0
    hang_fixed: bool = True
    hang_min: float = 10.0
    job_endpoint: Endpoint | None = None  # None: the launch command's, if any
    job_view: bool = True
    kill: bool = True
    watch: bool = True
    run_dir: str | None = None
    native: bool = False
    grace: float = 10.0  # SIGTERM -> SIGKILL when ending the job
    attach_timeout: float = 5.0
    # exit 1 when the job exited 0 but an error was found (NaN losses): opt-in, as a
    # heuristic check must not fail a pipeline that used to pass
    fail_on_findings: bool = False

    @property
    def poll_s(self) -> float:
        return max(0.2, min(1.0, self.hang_timeout / 5))

    @property
    def cpu_window_s(self) -> float:
        # "working now": CPU in the last few samples, not earlier in the quiet spell
        return max(2.0, 3 * self.poll_s)

    @property
    def recheck_s(self) -> float:
        # a hang the stacks show is confirmed by watching the culprits this long more
        return max(1.0, min(10.0, self.hang_timeout / 4))
