"""Exit codes (the contract scripts and CI rely on), the one error type that carries one,
and the one function that decides a command's exit code.

Standard library only: ``--help`` and the cli's last-resort error path import it.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum


class ExitCode(IntEnum):
    HEALTHY = 0  # nothing wrong was found
    FINDINGS = 1  # an error finding, or a check that failed without one
    USAGE = 2  # bad arguments or input (click's own usage errors exit 2 too)
    DOCTOR_FAILED = 3  # the doctor itself could not do its job; says why in one line


class DoctorError(Exception):
    """A command cannot go on: ``str()`` is the one-line reason, ``exit_code`` the code
    the process ends with (attach's and run's start-up failures are this)."""

    def __init__(self, reason: str, exit_code: int = ExitCode.DOCTOR_FAILED) -> None:
        super().__init__(reason)
        self.exit_code = int(exit_code)


def decide_exit_code(severities: Iterable[str], check_statuses: Iterable[str],
                     doctor_error: str = "", override: int | None = None) -> int:
    """The exit code of a finished report.

    ``override`` wins (``run`` passes the job's own exit code on); then a doctor that could
    not run (3); then any error finding, or any check line that ended red without a
    diagnosis (a rank that sent nothing is not healthy): 1; else 0.
    """
    if override is not None:
        return override
    if doctor_error:
        return ExitCode.DOCTOR_FAILED
    if "error" in set(severities) or "error" in set(check_statuses):
        return ExitCode.FINDINGS
    return ExitCode.HEALTHY
