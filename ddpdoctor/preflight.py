"""`ddpdoctor check` orchestration: run the probes on every rank, analyse, build a report.

The rank side (``run_probes``) is shared by the local launcher and by
``torchrun -m ddpdoctor.check_worker`` so that one node and many nodes run the same code.
"""

from __future__ import annotations

import importlib
import time
import traceback
from dataclasses import dataclass
from typing import Any

from ddpdoctor.findings import Finding
from ddpdoctor.report import Check, Report


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    module: str        # rank side: collect(ctx, opts) -> dict
    analysis: str      # parent side: analyze(per_rank, world_size) -> (Check, findings)
    group: str


PROBES: dict[str, ProbeSpec] = {
    p.name: p for p in [
        ProbeSpec("connectivity", "ddpdoctor.probes.connectivity",
                  "ddpdoctor.analysis.connectivity", "Communication"),
    ]
}


def run_probes(ctx: Any, names: list[str], opts: dict[str, Any]) -> dict[str, Any]:
    """Rank side: run each probe in order; a probe that raises is recorded, not fatal."""
    out: dict[str, Any] = {}
    for name in names:
        ctx.progress(name)
        start = time.perf_counter()
        try:
            data = importlib.import_module(PROBES[name].module).collect(ctx, opts)
            out[name] = {"data": data}
        except Exception as e:  # noqa: BLE001 - one broken probe must not hide the others
            out[name] = {"error": f"{type(e).__name__}: {e}".splitlines()[0],
                         "traceback": traceback.format_exc()}
        out[name]["seconds"] = round(time.perf_counter() - start, 3)
    ctx.progress("done")
    return out


def analyze_probes(per_rank: dict[int, dict[str, Any]], names: list[str], world_size: int,
                   report: Report) -> None:
    """Parent side: turn each probe's per-rank data into a check line and findings."""
    for name in names:
        spec = PROBES[name]
        errors = {r: res[name]["error"] for r, res in per_rank.items()
                  if name in res and "error" in res[name]}
        data = {r: res[name]["data"] for r, res in per_rank.items()
                if name in res and "data" in res[name]}
        if not data:
            why = next(iter(errors.values()), "no rank returned data")
            report.checks.append(Check(name, f"could not run: {why}", status="error",
                                       group=spec.group))
            continue
        check, findings = importlib.import_module(spec.analysis).analyze(data, world_size)
        if errors:
            check.summary += f"; failed on rank(s) {sorted(errors)}: {next(iter(errors.values()))}"
            check.status = "error"
        report.checks.append(check)
        for f in findings:
            report.add(f, check=check.name)


def run_check(nproc: int, names: list[str], backend: str | None, deadline_s: float,
              opts: dict[str, Any] | None = None,
              rank_env: dict[int, dict[str, str]] | None = None) -> Report:
    from ddpdoctor.analysis.launch import analyze_launch
    from ddpdoctor.launcher import launch

    report = Report("check")
    result = launch(run_probes, nproc=nproc, args=(names, opts or {}), backend=backend,
                    deadline_s=deadline_s, rank_env=rank_env)
    report.world = {"world_size": nproc, "backend": result.backend, "nodes": 1,
                    "deadline_s": deadline_s}
    per_rank = result.values()
    analyze_probes(per_rank, names, nproc, report)
    for f in analyze_launch(result):
        report.add(f)
    errors = {o.rank: o.error for o in result.outcomes if o.status == "error"}
    if errors and not per_rank:
        report.doctor_error = f"every rank failed to start: {next(iter(errors.values()))}"
    return report


__all__ = ["PROBES", "Finding", "analyze_probes", "run_check", "run_probes"]
