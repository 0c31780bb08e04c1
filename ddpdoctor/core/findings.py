"""Findings: the one output type of every mode (evidence -> analysis -> Finding -> report)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

from ddpdoctor.core import redact
from ddpdoctor.core.catalog import spec

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)
# The JSON report keeps the check a finding belongs to under this evidence key (schema
# ddpdoctor.report/1); in memory it is ``Finding.check``.
CHECK_KEY = "check"


@dataclass
class Finding:
    """One diagnosed problem.

    ``ranks`` are the culprit ranks where the problem starts, not every rank that felt it;
    empty when the problem belongs to the whole job or the launcher. ``evidence`` holds what
    a person needs to act on it (stack lines, parameter names, step, measured numbers) and
    must be JSON-serialisable. ``check`` names the check line of the report it belongs to
    (empty: none); it turns that line's status.
    """

    id: str
    title: str
    ranks: list[int] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)
    severity: Severity | Literal[""] = ""  # empty: the catalog's default for this id
    playbook: str = ""  # empty: the playbook named after the id
    check: str = ""

    def __post_init__(self) -> None:
        entry = spec(self.id)  # raises on an unknown id: a programming error
        if not self.severity:
            self.severity = cast(Severity, entry.severity)
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")
        if not self.playbook:
            self.playbook = self.id
        self.ranks = sorted({int(r) for r in self.ranks})
        if not self.check and CHECK_KEY in self.evidence:
            # Evidence written before the field existed (or read back from JSON).
            self.check = str(self.evidence.pop(CHECK_KEY))

    def redacted(self) -> Finding:
        """A copy with secrets masked in the title and the evidence (keys and values): what
        every view gets (terminal, JSON, HTML, framework loggers, metrics labels)."""
        return Finding(self.id, redact.text(self.title), list(self.ranks),
                       redact.deep(redact.keys(self.evidence)), self.severity, self.playbook,
                       self.check)

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "severity": self.severity,
            "title": self.title,
            "ranks": list(self.ranks),
            "evidence": {**self.evidence, CHECK_KEY: self.check} if self.check
            else self.evidence,
            "playbook": self.playbook,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        return cls(
            id=data["id"],
            title=data["title"],
            ranks=list(data.get("ranks", [])),
            evidence=dict(data.get("evidence", {})),
            severity=data.get("severity", ""),
            playbook=data.get("playbook", ""),
        )  # evidence["check"] becomes ``check`` in __post_init__


def format_ranks(ranks: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``: readable on 4 ranks and on 4,096."""
    if not ranks:
        return ""
    parts: list[str] = []
    start = prev = ranks[0]
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ",".join(parts)
