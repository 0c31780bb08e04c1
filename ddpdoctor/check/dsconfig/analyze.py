"""The rules applied to one config: findings, and the one line the report shows for it."""

from __future__ import annotations

from ddpdoctor.check.dsconfig.load import DsFacts
from ddpdoctor.check.dsconfig.rules import RULES, DsRule, JobFacts, bucket_bytes
from ddpdoctor.core.findings import Finding

FINDING = "DS_CONFIG_INVALID"


def analyze(facts: DsFacts, job: JobFacts) -> list[Finding]:
    """One finding per rule the config breaks, errors first."""
    out = [_finding(rule, msg, facts, job) for rule in RULES
           if (msg := rule.test(facts, job)) is not None]
    return sorted(out, key=lambda f: f.severity != "error")


def _finding(rule: DsRule, msg: str, facts: DsFacts, job: JobFacts) -> Finding:
    ev: dict[str, object] = {"rule": rule.name, "setting": rule.setting, "config": facts.path,
                             "source": rule.source}
    if job.world_size is not None:
        ev["world_size"] = job.world_size
    return Finding(FINDING, msg, ranks=[], evidence=ev, severity=rule.severity)


def summary(facts: DsFacts, job: JobFacts, findings: list[Finding]) -> str:
    """The check line: what was read and what could not be compared."""
    parts = [f"{facts.path}: ZeRO stage {facts.stage if facts.stage is not None else '?'}",
             "fp16" if facts.fp16 else "bf16" if facts.bf16 else "fp32",
             f"{len(RULES)} rules, {len(findings)} broken"]
    if job.world_size is None:
        parts.append("world size unknown (pass --world-size): batch sizes checked only "
                     "against each other")
    if bucket_bytes(facts) is not None and not job.device_mem:
        parts.append("buckets not compared with memory (pass --device-mem)")
    return "; ".join(parts)
