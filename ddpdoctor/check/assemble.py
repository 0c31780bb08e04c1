"""`ddpdoctor check`, parent side: every rank's probe data and launch outcome -> one Report."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ddpdoctor.check.options import CheckOptions
from ddpdoctor.check.probe import Probe, ProbeResult
from ddpdoctor.check.probes import PROBES
from ddpdoctor.core.findings import Finding, format_ranks
from ddpdoctor.core.report import Check, Report

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ddpdoctor.check.launcher.outcome import LaunchResult

GROUP_ORDER = ("Environment", "Communication", "Data", "GPU", "Topology")


def _analyze_one(probe: Probe[Any], data: dict[int, Mapping[str, object]], world_size: int,
                 opts: CheckOptions) -> tuple[list[Check], list[Finding]]:
    """One probe's analysis on whatever ranks sent data; a bug in it is a red check line,
    never a crash that loses the whole report."""
    try:
        checks, findings = probe.analyze(data, world_size, opts)
    except Exception as e:  # partial evidence must still give a report
        why = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        return [Check(probe.name, f"analysis failed on the data of rank(s) {sorted(data)}: "
                                  f"{why}", status="error", group=probe.group)], []
    return (checks if isinstance(checks, list) else [checks]), findings


def _split(per_rank: Mapping[int, Mapping[str, ProbeResult]], name: str
           ) -> tuple[dict[int, Mapping[str, object]], dict[int, str]]:
    """(data by rank, error by rank) of probe ``name``."""
    data = {r: res[name]["data"] for r, res in per_rank.items()
            if name in res and "data" in res[name]}
    errors = {r: res[name]["error"] for r, res in per_rank.items()
              if name in res and "error" in res[name]}
    return data, errors


def analyze_probes(per_rank: dict[int, dict[str, ProbeResult]], names: list[str], world_size: int,
                   report: Report, opts: CheckOptions | Mapping[str, object] | None = None,
                   not_run_reason: str = "", expected: list[int] | None = None) -> None:
    """Turn each probe's per-rank data into check lines and findings.

    ``expected`` are the ranks that should have sent data (default: those in
    ``per_rank``); a rank that sent nothing turns its check line red and is named there
    (the launch analysis says why it sent nothing).
    """
    options = CheckOptions.coerce(opts)
    expected = sorted(per_rank) if expected is None else expected
    for name in names:
        probe = PROBES[name]
        data, errors = _split(per_rank, name)
        if not data:
            why = next(iter(errors.values()), not_run_reason or "no rank returned data")
            report.checks.append(Check(name, f"could not run: {why}", status="error",
                                       group=probe.group))
            continue
        checks, findings = _analyze_one(probe, data, world_size, options)
        _mark_missing(checks[0], errors, [r for r in expected
                                          if r not in data and r not in errors])
        report.checks.extend(checks)
        for f in findings:
            report.add(f, check=checks[0].name)


def _mark_missing(first: Check, errors: dict[int, str], silent: list[int]) -> None:
    if errors:
        first.summary += (f"; failed on rank(s) {sorted(errors)}: "
                          f"{next(iter(errors.values()))}")
        first.status = "error"
    if silent:
        first.summary += f"; no data from rank(s) {format_ranks(silent)}"
        first.status = "error"


def _per_rank(result: LaunchResult) -> dict[int, dict[str, ProbeResult]]:
    """Each rank's probe results: its pre-init ones, plus the others if it finished."""
    per_rank: dict[int, dict[str, ProbeResult]] = {}
    for o in result.outcomes:
        # Both are the dicts run_pre_probes / run_probes returned, or None.
        merged = dict(o.pre) if isinstance(o.pre, dict) else {}
        if o.status == "ok" and isinstance(o.value, dict):
            merged.update(o.value)
        if merged:
            per_rank[o.rank] = merged
    return per_rank


def _world(result: LaunchResult, per_rank: dict[int, dict[str, ProbeResult]]) -> dict[str, object]:
    hosts = {d["env"]["data"]["hostname"] for d in per_rank.values()
             if "data" in d.get("env", {})}
    world: dict[str, object] = {"world_size": result.world_size, "backend": result.backend,
             "nodes": len(hosts) or 1, "deadline_s": result.deadline_s}
    if getattr(result, "store_address", ""):
        # Where the doctor's own rendezvous store listened (docs/safety.md).
        world["store_listen"] = result.store_address
    return world


def _init_failure(result: LaunchResult) -> str:
    from ddpdoctor.check.launcher import STATUS_ERROR

    failed = {o.rank: o.error for o in result.outcomes
              if o.status == STATUS_ERROR and o.last_step == "init_process_group"}
    if not failed:
        return ""
    return (f"process group init failed on rank(s) {sorted(failed)}: "
            f"{next(iter(failed.values()))}")


def assemble_report(result: LaunchResult, names: list[str],
                    opts: CheckOptions | Mapping[str, object],
                    parent: dict[str, ProbeResult] | None = None) -> Report:
    """Every rank's outcome (a LaunchResult, local or rebuilt by the worker) -> Report."""
    options = CheckOptions.coerce(opts)
    if options.backend is None:
        options = options.replace(backend=result.backend)
    per_rank = _per_rank(result)
    report = Report("check", world=_world(result, per_rank),
                    started=time.time() - result.elapsed_s)
    parent_names = [n for n in names if PROBES[n].stage == "parent"]
    if parent_names and parent is not None:
        analyze_probes({0: parent}, parent_names, result.world_size, report, options)
    rank_names = [n for n in names if PROBES[n].stage != "parent"]
    analyze_probes(per_rank, rank_names, result.world_size, report, options,
                   not_run_reason=_init_failure(result),
                   expected=list(range(result.world_size)))
    _fold_into_reachability(report)
    _add_launch_findings(report, result, rank_names)
    _merge_duplicates(report)
    _order_checks(report)
    if not per_rank and not report.findings:
        first = next((o.error for o in result.outcomes if o.error), "no rank reported back")
        report.doctor_error = f"no rank could run a probe: {first}"
    return report


def _fold_into_reachability(report: Report) -> None:
    """A backend transfer that fails between ranks the mesh already found cut off is the
    same fault seen again: kept as evidence of the mesh's finding, not a second culprit."""
    mesh = [f for f in report.findings if f.check == "reachability" and f.severity == "error"]
    if not mesh:
        return
    cut = {r for f in mesh for r in f.ranks}
    kept = []
    for f in report.findings:
        if f.check == "connectivity" and set(f.ranks) & cut:
            target = next((m for m in mesh if set(f.ranks) & set(m.ranks)), mesh[0])
            also = target.evidence.setdefault("backend_also_failed", [])
            assert isinstance(also, list)  # only ever set here, as a list
            also.append(f.title)
            continue
        kept.append(f)
    report.findings[:] = kept


def _add_launch_findings(report: Report, result: LaunchResult, rank_names: list[str]) -> None:
    from ddpdoctor.check.analysis.launch import analyze_launch, raised_findings

    stall = {n: PROBES[n].stall_finding for n in rank_names}
    for f in analyze_launch(result, stall):
        report.add(f)
    # A rank that raised (init failed, a probe harness error) and that no finding names yet
    # still fails the check: a rank that did not report is never healthy.
    named = {r for f in report.findings if f.severity == "error" for r in f.ranks}
    if any(f.check == "reachability" and f.severity == "error" for f in report.findings):
        # A pair that cannot connect fails gloo's full-mesh init on whichever ranks give
        # up first, the innocent ones included: the mesh's finding already names the cause.
        named |= {o.rank for o in result.outcomes if o.last_step == "init_process_group"}
    for f in raised_findings(result, named):
        report.add(f)


def _merge_duplicates(report: Report) -> None:
    """Two probes can find the same root cause (a tiny /dev/shm is seen by the env and the
    dataloader probes): keep one finding per id and culprit ranks, with both evidences."""
    seen: dict[tuple[str, tuple[int, ...]], Finding] = {}
    kept = []
    for f in report.findings:
        key = (f.id, tuple(f.ranks))
        # Within one check, two findings are two problems (two variables that differ).
        if key in seen and seen[key].check != f.check:
            _also_seen(report, seen[key], f)
            continue
        seen.setdefault(key, f)
        kept.append(f)
    report.findings = kept


def _also_seen(report: Report, first: Finding, again: Finding) -> None:
    also = first.evidence.setdefault("also_seen_by", [])
    assert isinstance(also, list)  # only ever set here, as a list
    also.append({"check": again.check or None, "title": again.title})
    # The check that found it too keeps its mark (a failed dataloader stays red).
    for check in report.checks:
        if check.name == again.check and check.status != "skipped" and \
                again.severity in ("error", "warning"):
            check.status = again.severity


def _order_checks(report: Report) -> None:
    """One heading per group, in a fixed order, whatever stage each probe ran in."""
    rank = {g: i for i, g in enumerate(GROUP_ORDER)}
    report.checks.sort(key=lambda c: rank.get(c.group, len(GROUP_ORDER)))
