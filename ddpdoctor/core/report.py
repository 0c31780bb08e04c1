"""The report every command produces: findings plus what was checked, and the exit code."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, get_args

from ddpdoctor.core import redact
from ddpdoctor.core.contract import REPORT_SCHEMA
from ddpdoctor.core.errors import ExitCode, decide_exit_code
from ddpdoctor.core.findings import Finding
from ddpdoctor.core.next_step import NextStep, decide

SCHEMA = REPORT_SCHEMA

# Exit codes (docs/design.md): the contract scripts and CI rely on.
EXIT_HEALTHY = ExitCode.HEALTHY
EXIT_FINDINGS = ExitCode.FINDINGS
EXIT_USAGE = ExitCode.USAGE
EXIT_DOCTOR_FAILED = ExitCode.DOCTOR_FAILED

CheckStatus = Literal["ok", "warning", "error", "skipped"]
CHECK_STATUSES: tuple[CheckStatus, ...] = get_args(CheckStatus)


@dataclass
class Check:
    """One line of the doctor-style view: a probe or analysis step and how it went.

    ``status`` is derived from the findings attached to it unless it was skipped; a
    skipped check always says why in ``summary``.
    """

    name: str
    summary: str
    status: CheckStatus = "ok"
    group: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in CHECK_STATUSES:
            raise ValueError(f"check status must be one of {CHECK_STATUSES}")


@dataclass
class Report:
    command: str
    findings: list[Finding] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    world: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    duration_s: float | None = None
    # Set when the doctor itself could not do its job (exit 3); says why in one line.
    doctor_error: str = ""
    # `run` passes the job's own exit code on instead of the findings' verdict.
    exit_override: int | None = None
    # what a report with no finding may claim, where "No issues found" claims too much: a
    # log without a failure in it is not a healthy job (a hang leaves no error behind)
    clear: str = ""

    def add(self, finding: Finding, check: str | None = None) -> None:
        """Add a finding; ``check`` names the check line it belongs to unless the finding
        already names one."""
        if check is not None and not finding.check:
            finding.check = check
        self.findings.append(finding)

    def finish(self) -> Report:
        if self.duration_s is None:
            self.duration_s = round(time.time() - self.started, 3)
        return self

    def check_status(self, check: Check) -> CheckStatus:
        if check.status == "skipped":
            return "skipped"
        severities = {f.severity for f in self.findings if f.check == check.name}
        if "error" in severities:
            return "error"
        if "warning" in severities:
            return "warning"
        return check.status

    @property
    def exit_code(self) -> int:
        return int(decide_exit_code((f.severity for f in self.findings),
                                    (self.check_status(c) for c in self.checks),
                                    self.doctor_error, self.exit_override))

    def redacted(self) -> Report:
        """A copy whose every text and evidence value went through ``scrub``: what the
        terminal view and the JSON show, whichever command built the report."""
        # `command` is free text in a report read back by `ddpdoctor report` (the page's
        # title): "run --token X" was shown as written.
        copy = Report(redact.text(self.command), world=scrub(self.world), started=self.started,
                      duration_s=self.duration_s, doctor_error=redact.text(self.doctor_error),
                      exit_override=self.exit_override, clear=self.clear)
        copy.findings = [f.redacted() for f in self.findings]
        for f in copy.findings:  # keeps naming its check line, whose name is masked below
            f.check = redact.text(f.check)
        # A check's name can be a log file's name (diagnose): `HF_TOKEN=x.log` is masked too.
        copy.checks = [Check(redact.text(c.name), redact.text(c.summary), c.status, c.group,
                             scrub(c.data)) for c in self.checks]
        return copy

    def next_step(self) -> NextStep:
        """What to do about this report (``next_step.decide``): every view shows it."""
        return decide(self.sorted_findings(), self.doctor_error)

    def sorted_findings(self) -> list[Finding]:
        order = {"error": 0, "warning": 1, "info": 2}
        return sorted(self.findings, key=lambda f: order[f.severity])

    def to_dict(self) -> dict[str, object]:
        """The JSON report, secrets masked (``scrub``)."""
        self.finish()
        return scrub(self._plain_dict())

    def _plain_dict(self) -> dict[str, object]:
        return {
            "schema": SCHEMA,
            "command": self.command,
            "started": datetime.fromtimestamp(self.started, timezone.utc).isoformat(),
            "duration_s": self.duration_s,
            "world": self.world,
            "findings": [f.to_dict() for f in self.sorted_findings()],
            "probes": {
                c.name: {"status": self.check_status(c), "summary": c.summary,
                         "group": c.group, "data": c.data}
                for c in self.checks
            },
            "exit_code": self.exit_code,
            "doctor_error": self.doctor_error or None,
            "action": self.next_step().to_dict(),
            # only where a command says what no finding means (diagnose): the keys of
            # the other commands' reports are unchanged (tests/functional/test_check_report_keys.py)
            **({"clear": self.clear} if self.clear else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        """Rebuild a report written by ``to_dict`` (e.g. by a rank on another process)."""
        started = datetime.fromisoformat(data["started"]).timestamp()
        report = cls(data["command"], world=dict(data.get("world", {})), started=started,
                     duration_s=data.get("duration_s"),
                     doctor_error=data.get("doctor_error") or "",
                     clear=data.get("clear") or "")
        report.findings = [Finding.from_dict(f) for f in data.get("findings", [])]
        for name, probe in data.get("probes", {}).items():
            report.checks.append(Check(name, probe.get("summary", ""),
                                       status=probe.get("status", "ok"),
                                       group=probe.get("group", ""),
                                       data=probe.get("data", {})))
        return report

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def write_json(self, path: str | Path) -> None:
        """Write the JSON report through the one output path (``-`` is stdout); a write
        that fails raises DoctorError (exit 3)."""
        from ddpdoctor.core import outputs

        outputs.write(outputs.Target("--json", str(path)),
                      (self.to_json() + "\n").encode("utf-8"))


def scrub(obj: dict[str, object]) -> dict[str, object]:
    """The catch-all pass every report goes through before it is shown or written: secret
    looking names get ``***`` values, texts that quote a secret assignment or flag are
    masked (``redact``). Probes mask what they know to be secret where they collect it;
    this is the net under them."""
    return redact.deep(redact.keys(obj))
