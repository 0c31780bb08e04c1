"""What run does when it is signalled: Ctrl-C once is passed on, everything else ends it.

- the first SIGINT (Ctrl-C) goes to the job's launcher process group, as a terminal would
  send it: torchrun stops its ranks its own way and run keeps supervising;
- a second SIGINT kills the whole job tree at once (SIGKILL: the user asked twice);
- SIGTERM, SIGHUP (the terminal or ssh closed) and SIGQUIT end the job through run's one
  cleanup path: SIGTERM to every process of the job, SIGKILL after --kill-grace;
  a further signal during that grace turns it into SIGKILL at once.

Handlers only record; the supervision loop acts (no work in a signal handler).
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

from ddpdoctor.core.signames import signal_name

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

    from ddpdoctor.run.process import Job

    # what signal.signal returns: a handler, SIG_DFL/SIG_IGN, or None (not set from Python)
    _Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None

_ENDING = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class RunSignals:
    def __init__(self) -> None:
        self.job: Job | None = None  # once started
        self.interrupts = 0  # SIGINTs received
        self.teardown = ""  # why run ends the job ("" while it does not)
        self.hurry = False  # SIGKILL now, no grace
        self.terminal_gone = False
        self._pending_interrupt = False  # a Ctrl-C before the job was there to get it
        # how much of the job's kept output was written when the first ending signal came:
        # what it printed before, not the tracebacks the signal itself makes it print
        self.output_bytes: int | None = None
        self._saved: dict[int, _Handler] = {}

    def __enter__(self) -> RunSignals:
        for sig in (signal.SIGINT, *_ENDING):
            try:
                self._saved[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (tests): no handling
                pass
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._saved.items():
            signal.signal(sig, old)

    def attach(self, job: Job) -> None:
        """The job started: from now on a first Ctrl-C goes to it (one that came while
        it was starting is passed on now: its output may already have been seen)."""
        self.job = job
        if self._pending_interrupt:
            self._pending_interrupt = False
            self.output_bytes = job.copy.kept_bytes()
            job.signal_group(signal.SIGINT)

    @property
    def received(self) -> bool:
        return bool(self.interrupts or self.teardown)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal_name(signum) or f"signal {signum}"
        if self.output_bytes is None and self.job is not None:
            self.output_bytes = self.job.copy.kept_bytes()
        if self.teardown:
            self.hurry = True  # asked again while the grace runs
            return
        if signum == signal.SIGINT:
            self.interrupts += 1
            if self.interrupts == 1:
                if self.job is not None:
                    self.job.signal_group(signal.SIGINT)
                else:
                    self._pending_interrupt = True
                return
            self.teardown, self.hurry = "a second Ctrl-C (SIGINT) to ddpdoctor run", True
            return
        if signum == signal.SIGHUP:
            self.terminal_gone = True
        self.teardown = f"{name} to ddpdoctor run"
