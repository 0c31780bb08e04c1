"""The config check as a line of check's report (its findings attached to it)."""

from __future__ import annotations

from ddpdoctor.check.dsconfig.analyze import analyze, summary
from ddpdoctor.check.dsconfig.load import read
from ddpdoctor.check.dsconfig.rules import JobFacts
from ddpdoctor.core.report import Check, CheckStatus, Report

CHECK = "deepspeed config"


def add_config_check(report: Report, job: JobFacts) -> None:
    """Read ``job.config`` (DoctorError, exit 2, on a bad file), apply the rules, and add
    the line and its findings to ``report``."""
    path = job.config
    facts = read(path)
    findings = analyze(facts, job)
    status: CheckStatus = ("error" if any(f.severity == "error" for f in findings)
              else "warning" if findings else "ok")
    report.checks.append(Check(CHECK, summary(facts, job, findings), status=status,
                               group="Config", data={"config": path}))
    for f in findings:
        report.add(f, check=CHECK)


def config_only_report(job: JobFacts) -> Report:
    """``check --ds-config FILE`` with no --probe: the config alone, no rank started."""
    report = Report("check", world={"world_size": job.world_size or 0, "nodes": 1})
    add_config_check(report, job)
    return report
