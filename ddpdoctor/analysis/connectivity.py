"""Connectivity evidence -> COMM_CONNECTIVITY."""

from __future__ import annotations

from typing import Any

from ddpdoctor.findings import Finding, format_ranks
from ddpdoctor.report import Check


def analyze(per_rank: dict[int, dict[str, Any]], world_size: int) -> tuple[Check, list[Finding]]:
    findings = []
    wrong = sorted(r for r, d in per_rank.items() if not d.get("allreduce_ok"))
    if wrong:
        findings.append(Finding(
            "COMM_CONNECTIVITY",
            "world all-reduce returned a wrong result",
            ranks=wrong,
            evidence={"expected": per_rank[wrong[0]].get("allreduce_expected"),
                      "got": {r: per_rank[r].get("allreduce_got") for r in wrong}},
        ))
    worst = max((d.get("allreduce_ms", 0.0) for d in per_rank.values()), default=0.0)
    summary = (f"world all-reduce on {world_size} ranks "
               + ("ok" if not wrong else f"wrong on rank {format_ranks(wrong)}")
               + f" ({worst:.1f} ms)")
    return Check("connectivity", summary, group="Communication"), findings
