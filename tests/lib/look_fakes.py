"""The shape of attach's analysis that run's verdict reads (a rank's state, the headline,
the findings), as plain records: the verdict tests build a look's outcome without stacks."""

from __future__ import annotations

from dataclasses import dataclass, field

from ddpdoctor.core.findings import Finding


@dataclass
class State:
    rank: int
    kind: str
    pid: int = 0


@dataclass
class Diagnosis:
    states: list[State]
    findings: list[Finding] = field(default_factory=list)
    headline: str = ""
    fr_verdicts: list = field(default_factory=list)
