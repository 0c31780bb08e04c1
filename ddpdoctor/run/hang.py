"""A quiet job: read its stacks (attach); hang/verdict.py decides if it is hung."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ddpdoctor.core.report import Check, Report

if TYPE_CHECKING:
    from collections.abc import Mapping

    # run's other modules name attach's diagnosis and its parts through here, run's glue
    # to attach (the package layers, tests/unit/test_layers.py)
    from ddpdoctor.attach.diagnosis import HangDiagnosis
    from ddpdoctor.attach.diagnosis import RankState as RankState

CHECK = "hang"
GROUP = "run"


@dataclass
class HangOutcome:
    no_progress_s: float
    last_progress: str
    diagnosis: HangDiagnosis | None = None
    error: str = ""  # why the diagnosis could not be made
    stopped: bool = False
    stop_status: int | None = None
    timings: dict[str, float] = field(default_factory=dict)
    detected_at: float = field(default_factory=time.time)  # wall time, for comparisons
    # how much of the kept output was written when the hang was confirmed: what the job
    # printed before run stopped it (its cause may be there), not the stop's own teardown
    output_bytes: int | None = None

    def add_to(self, report: Report, hang_timeout: float) -> None:
        what = (f"no rank made progress for {self.no_progress_s:.1f} s "
                f"(--hang-timeout {hang_timeout:g}); last progress: {self.last_progress}")
        if self.stopped:
            what += "; the job was stopped"
        data = {"no_progress_s": round(self.no_progress_s, 2), "hang_timeout_s": hang_timeout,
                "last_progress": self.last_progress, "stopped": self.stopped,
                "detected_at": round(self.detected_at, 3),
                "timings": self.timings}
        if self.error:
            what += f"; no diagnosis: {self.error}"
        report.checks.append(Check(CHECK, what, status="error", group=GROUP, data=data))
        if self.diagnosis is not None:
            self.diagnosis.add_to(report)


def diagnose(job_pid: int, no_progress_s: float, last_progress: str, native: bool = False,
             timeout: float = 5.0, gone: Mapping[int, str] | None = None) -> HangOutcome:
    """Stacks (and Flight Recorder dumps) of every rank under ``job_pid``; ``gone``: the
    ranks run saw exit (rank -> how), dead where no process of theirs is found; never
    raises."""
    from ddpdoctor.attach.diagnosis import diagnose_hang
    from ddpdoctor.attach.discover import AttachError
    from ddpdoctor.attach.stacks import StackError

    out = HangOutcome(no_progress_s, last_progress)
    t0 = time.monotonic()
    try:
        out.diagnosis = diagnose_hang([job_pid], native=native, timeout=timeout, gone=gone)
    except (AttachError, StackError) as e:
        out.error = str(e)
    except Exception as e:  # the job must still be stopped and reported
        out.error = f"{type(e).__name__}: {e}"
    out.timings["diagnose_s"] = round(time.monotonic() - t0, 3)
    return out


def print_diagnosis(report: Report, outcome: HangOutcome) -> None:
    """The report view plus attach's merged stacks (what `ddpdoctor attach` prints)."""
    from ddpdoctor.core.render import render

    render(report)
    d = outcome.diagnosis
    if d is not None and d.groups:
        from ddpdoctor.attach.view import render_stack_groups

        render_stack_groups(d.groups, d.culprits)
