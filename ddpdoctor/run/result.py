"""What one supervised run found and did: filled in by the loop, read by the report.

A module of its own (runner.py re-exports it): the loop and the report (outcome.py) take
it by type, and runner imports both. The job view's types are named through run/jobnode.py,
run's one glue to jobview (the package layers, tests/unit/test_layers.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ddpdoctor.run.attempts import Attempts
from ddpdoctor.run.spawn_ranks import SpawnRanks

if TYPE_CHECKING:
    from ddpdoctor.core.report import Report
    from ddpdoctor.run.attempt_report import AttemptEnd
    from ddpdoctor.run.hang import HangOutcome
    from ddpdoctor.run.jobnode import NodeEnd, Verdict
    from ddpdoctor.run.looks import Look
    from ddpdoctor.run.memory import MemoryHistory
    from ddpdoctor.run.options import RunOptions
    from ddpdoctor.run.progress import ProgressTracker
    from ddpdoctor.run.redirected import Redirect
    from ddpdoctor.run.tree import Killed


@dataclass
class Watched:
    """What the supervision loop found: written by the loop alone (loop.py), read by the
    end of the job (runner.py) and the report (outcome.py)."""

    # the options as they stood at the end: the adaptive hang threshold the job reached
    options: RunOptions
    hang: HangOutcome | None = None
    stopped_for_hang: bool = False  # the loop ended the job for a confirmed hang
    looks: list[Look] = field(default_factory=list)  # quiet spells that were no hang
    job_verdicts: list[Verdict] = field(default_factory=list)  # the job view's, the last 20


@dataclass
class RunResult:
    """One supervised run: the loop's findings (``watched``, the loop's to write), how the
    job ended (runner.py's), and the report and exit code (outcome.py's)."""

    report: Report
    exit_code: int
    watched: Watched
    returncode: int | None = None
    interrupted: int = 0
    run_dir: str = ""
    notes: list[str] = field(default_factory=list)
    killed: list[Killed] = field(default_factory=list)
    ended_by: str = "the job exited"  # why run ended the job's tree
    teardown: str = ""  # the signal run got, if one ended it
    signalled_at_bytes: int | None = None  # the kept output's size when it came
    terminal_gone: bool = False
    memory: MemoryHistory | None = None
    secrets: list[str] = field(default_factory=list)
    tracker: ProgressTracker | None = None
    job_end: NodeEnd | None = None  # what the job view knew at the end
    # mp.spawn / multiprocessing children and the rank read from each (run/spawn_ranks.py)
    spawn: SpawnRanks = field(default_factory=SpawnRanks)
    attempts: Attempts = field(default_factory=Attempts)  # torchrun restarts
    attempt_ends: list[AttemptEnd] = field(default_factory=list)
    # where the launcher wrote its ranks' output instead of the console (run/redirected.py)
    redirect: Redirect | None = None

    @property
    def hang(self) -> HangOutcome | None:
        return self.watched.hang

    @property
    def options(self) -> RunOptions:
        return self.watched.options
