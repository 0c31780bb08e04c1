"""`ddpdoctor check` orchestration: run the probes on every rank, analyse, build a report.

The rank side (``run_pre_probes`` / ``run_probes``) is shared by the local launcher and by
``torchrun -m ddpdoctor.check_worker`` so that one node and many nodes run the same code.
Probes that need no process group run before it is created, so their evidence survives a
failed init (that is usually when it is needed most).
"""

from __future__ import annotations

import importlib
import inspect
import time
import traceback
from dataclasses import dataclass
from typing import Any

from ddpdoctor.findings import format_ranks
from ddpdoctor.report import Check, Report


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    module: str        # rank side: collect(ctx, opts) -> dict
    analysis: str      # parent side: analyze(per_rank, world_size[, opts]) -> (checks, findings)
    group: str
    # "rank": inside every rank, with the process group; "pre_init": inside every rank,
    # before the process group exists; "parent": once, in the doctor's own process.
    stage: str = "rank"
    # What a rank still inside this probe at the deadline means (analysis/launch.py).
    stall_finding: str = "RANK_UNRESPONSIVE"


PROBES: dict[str, ProbeSpec] = {
    p.name: p for p in [
        ProbeSpec("env", "ddpdoctor.probes.env", "ddpdoctor.analysis.env", "Environment",
                  stage="pre_init"),
        ProbeSpec("rendezvous", "ddpdoctor.probes.rendezvous",
                  "ddpdoctor.analysis.rendezvous", "Communication", stage="parent"),
        ProbeSpec("connectivity", "ddpdoctor.probes.connectivity",
                  "ddpdoctor.analysis.connectivity", "Communication",
                  stall_finding="COMM_CONNECTIVITY"),
        ProbeSpec("bandwidth", "ddpdoctor.probes.bandwidth", "ddpdoctor.analysis.bandwidth",
                  "Communication", stall_finding="COMM_CONNECTIVITY"),
        ProbeSpec("dataloader", "ddpdoctor.probes.dataloader", "ddpdoctor.analysis.dataloader",
                  "Data", stall_finding="DATALOADER_WORKER_FAILURE"),
        ProbeSpec("gpu", "ddpdoctor.probes.gpu", "ddpdoctor.analysis.gpu", "GPU"),
        ProbeSpec("topology", "ddpdoctor.probes.topology", "ddpdoctor.analysis.topology",
                  "Topology"),
    ]
}


def _run(ctx: Any, names: list[str], opts: dict[str, Any], stage: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        if PROBES[name].stage != stage:
            continue
        if ctx is not None:
            ctx.progress(name)
        start = time.perf_counter()
        try:
            data = importlib.import_module(PROBES[name].module).collect(ctx, opts)
            out[name] = {"data": data}
        except Exception as e:  # noqa: BLE001 - one broken probe must not hide the others
            out[name] = {"error": f"{type(e).__name__}: {e}".splitlines()[0],
                         "traceback": traceback.format_exc()}
        out[name]["seconds"] = round(time.perf_counter() - start, 3)
    return out


def run_pre_probes(ctx: Any, names: list[str], opts: dict[str, Any]) -> dict[str, Any]:
    """Rank side, before the process group exists."""
    return _run(ctx, names, opts, "pre_init")


def run_probes(ctx: Any, names: list[str], opts: dict[str, Any]) -> dict[str, Any]:
    """Rank side, with the process group; a probe that raises is recorded, not fatal."""
    out = _run(ctx, names, opts, "rank")
    ctx.progress("done")
    return out


def _analyze_one(spec: ProbeSpec, data: dict[int, Any], world_size: int,
                 opts: dict[str, Any]) -> tuple[list[Check], list[Any]]:
    """One probe's analysis on whatever ranks sent data; a bug in it is a red check line,
    never a crash that loses the whole report."""
    analyze = importlib.import_module(spec.analysis).analyze
    try:
        if "opts" in inspect.signature(analyze).parameters:
            checks, findings = analyze(data, world_size, opts=opts)
        else:
            checks, findings = analyze(data, world_size)
    except Exception as e:  # noqa: BLE001 - partial evidence must still give a report
        why = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        return [Check(spec.name, f"analysis failed on the data of rank(s) {sorted(data)}: "
                                 f"{why}", status="error", group=spec.group)], []
    return (checks if isinstance(checks, list) else [checks]), findings


def analyze_probes(per_rank: dict[int, dict[str, Any]], names: list[str], world_size: int,
                   report: Report, opts: dict[str, Any] | None = None,
                   not_run_reason: str = "", expected: list[int] | None = None) -> None:
    """Parent side: turn each probe's per-rank data into check lines and findings.

    ``expected`` are the ranks that should have sent data (default: those in
    ``per_rank``); a rank that sent nothing turns its check line red and is named there
    (the launch analysis says why it sent nothing).
    """
    expected = sorted(per_rank) if expected is None else expected
    for name in names:
        spec = PROBES[name]
        errors = {r: res[name]["error"] for r, res in per_rank.items()
                  if name in res and "error" in res[name]}
        data = {r: res[name]["data"] for r, res in per_rank.items()
                if name in res and "data" in res[name]}
        silent = [r for r in expected if r not in data and r not in errors]
        if not data:
            why = next(iter(errors.values()), not_run_reason or "no rank returned data")
            report.checks.append(Check(name, f"could not run: {why}", status="error",
                                       group=spec.group))
            continue
        checks, findings = _analyze_one(spec, data, world_size, opts or {})
        first = checks[0]
        if errors:
            first.summary += (f"; failed on rank(s) {sorted(errors)}: "
                              f"{next(iter(errors.values()))}")
            first.status = "error"
        if silent:
            first.summary += f"; no data from rank(s) {format_ranks(silent)}"
            first.status = "error"
        report.checks.extend(checks)
        for f in findings:
            report.add(f, check=f.evidence.get("check", first.name))


def run_check(nproc: int, names: list[str], backend: str | None, deadline_s: float,
              opts: dict[str, Any] | None = None,
              rank_env: dict[int, dict[str, str]] | None = None,
              on_progress: Any = None) -> Report:
    """One node: start ``nproc`` ranks with the launcher and check them."""
    from ddpdoctor.launcher import launch

    opts = dict(opts or {})
    parent = _run(None, names, opts, "parent")
    if all(PROBES[n].stage == "parent" for n in names):
        # Nothing needs ranks: do not pay for starting them.
        report = Report("check", world={"world_size": nproc, "nodes": 1})
        analyze_probes({0: parent}, names, nproc, report, opts)
        return report
    result = launch(run_probes, nproc=nproc, args=(names, opts), backend=backend,
                    deadline_s=deadline_s, rank_env=rank_env, pre_init=run_pre_probes,
                    on_progress=on_progress)
    return assemble_report(result, names, opts, parent)


def assemble_report(result: Any, names: list[str], opts: dict[str, Any],
                    parent: dict[str, Any] | None = None) -> Report:
    """Every rank's outcome (a LaunchResult, local or rebuilt by check_worker) -> Report."""
    from ddpdoctor.analysis.launch import analyze_launch, raised_findings
    from ddpdoctor.launcher import STATUS_ERROR

    opts = dict(opts)
    opts.setdefault("backend", result.backend)
    per_rank: dict[int, dict[str, Any]] = {}
    for o in result.outcomes:
        merged = dict(o.pre or {})
        if o.status == "ok":
            merged.update(o.value or {})
        if merged:
            per_rank[o.rank] = merged
    hosts = {d["env"]["data"]["hostname"] for d in per_rank.values()
             if "data" in d.get("env", {})}
    world = {"world_size": result.world_size, "backend": result.backend,
             "nodes": len(hosts) or 1, "deadline_s": result.deadline_s}
    if getattr(result, "store_address", ""):
        # Where the doctor's own rendezvous store listened (docs/safety.md).
        world["store_listen"] = result.store_address
    report = Report("check", world=world, started=time.time() - result.elapsed_s)
    init_failed = {o.rank: o.error for o in result.outcomes
                   if o.status == STATUS_ERROR and o.last_step == "init_process_group"}
    reason = ""
    if init_failed:
        reason = (f"process group init failed on rank(s) {sorted(init_failed)}: "
                  f"{next(iter(init_failed.values()))}")
    parent_names = [n for n in names if PROBES[n].stage == "parent"]
    if parent_names and parent is not None:
        analyze_probes({0: parent}, parent_names, result.world_size, report, opts)
    rank_names = [n for n in names if PROBES[n].stage != "parent"]
    analyze_probes(per_rank, rank_names, result.world_size, report, opts,
                   not_run_reason=reason, expected=list(range(result.world_size)))
    stall = {n: PROBES[n].stall_finding for n in rank_names}
    for f in analyze_launch(result, stall):
        report.add(f)
    # A rank that raised (init failed, a probe harness error) and that no finding names yet
    # still fails the check: a rank that did not report is never healthy.
    named = {r for f in report.findings if f.severity == "error" for r in f.ranks}
    for f in raised_findings(result, named):
        report.add(f)
    _merge_duplicates(report)
    _order_checks(report)
    if not per_rank and not report.findings:
        first = next((o.error for o in result.outcomes if o.error), "no rank reported back")
        report.doctor_error = f"no rank could run a probe: {first}"
    return report


def _merge_duplicates(report: Report) -> None:
    """Two probes can find the same root cause (a tiny /dev/shm is seen by the env and the
    dataloader probes): keep one finding per id and culprit ranks, with both evidences."""
    seen: dict[tuple[str, tuple[int, ...]], Any] = {}
    kept = []
    for f in report.findings:
        key = (f.id, tuple(f.ranks))
        # Within one check, two findings are two problems (two variables that differ).
        if key in seen and seen[key].evidence.get("check") != f.evidence.get("check"):
            first = seen[key]
            first.evidence.setdefault("also_seen_by", []).append(
                {"check": f.evidence.get("check"), "title": f.title})
            # The check that found it too keeps its mark (a failed dataloader stays red).
            for check in report.checks:
                if check.name == f.evidence.get("check") and check.status != "skipped":
                    check.status = f.severity if f.severity != "info" else check.status
            continue
        seen.setdefault(key, f)
        kept.append(f)
    report.findings = kept


GROUP_ORDER = ("Environment", "Communication", "Data", "GPU", "Topology")


def _order_checks(report: Report) -> None:
    """One heading per group, in a fixed order, whatever stage each probe ran in."""
    rank = {g: i for i, g in enumerate(GROUP_ORDER)}
    report.checks.sort(key=lambda c: rank.get(c.group, len(GROUP_ORDER)))
