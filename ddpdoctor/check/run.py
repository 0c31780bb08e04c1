"""`ddpdoctor check` orchestration, rank side and one-node driver.

The rank side (``run_pre_probes`` / ``run_probes``) is shared by the local launcher and by
``torchrun -m ddpdoctor.check.worker`` so that one node and many nodes run the same code.
Probes that need no process group run before it is created, so their evidence survives a
failed init (that is usually when it is needed most). The parent side is ``assemble``.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from ddpdoctor.check.assemble import analyze_probes, assemble_report
from ddpdoctor.check.options import CheckOptions
from ddpdoctor.check.probe import ProbeResult, Stage
from ddpdoctor.check.probes import PROBES
from ddpdoctor.core.report import Report

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ddpdoctor.check.launcher.outcome import RankContext

__all__ = ["PROBES", "analyze_probes", "assemble_report", "run_check", "run_pre_probes",
           "run_probes"]


def _run(ctx: RankContext | None, names: list[str], opts: CheckOptions,
         stage: Stage) -> dict[str, ProbeResult]:
    """Each probe of ``stage``: ``{"data": ...}`` or ``{"error", "traceback"}``, timed."""
    out: dict[str, ProbeResult] = {}
    for name in names:
        probe = PROBES[name]
        if probe.stage != stage:
            continue
        if ctx is not None:
            ctx.progress(name)
        start = time.perf_counter()
        try:
            # ctx is None only in the parent, where only parent-stage probes run, and
            # those take None: the stage, not the type, says which.
            out[name] = {"data": probe.collect(cast("RankContext", ctx), opts)}
        except Exception as e:  # one broken probe must not hide the others
            out[name] = {"error": f"{type(e).__name__}: {e}".splitlines()[0],
                         "traceback": traceback.format_exc()}
        out[name]["seconds"] = round(time.perf_counter() - start, 3)
    return out


def run_pre_probes(ctx: RankContext, names: list[str],
                   opts: CheckOptions | Mapping[str, object]) -> dict[str, ProbeResult]:
    """Rank side, before the process group exists."""
    return _run(ctx, names, CheckOptions.coerce(opts), "pre_init")


def run_probes(ctx: RankContext, names: list[str],
               opts: CheckOptions | Mapping[str, object]) -> dict[str, ProbeResult]:
    """Rank side, with the process group; a probe that raises is recorded, not fatal."""
    if getattr(ctx, "skip_init", ""):
        # No process group (a pre-init probe proved it cannot form): every rank probe
        # says why it did not run, and the check ends now instead of at the deadline.
        ctx.progress("done")
        return {n: {"error": ctx.skip_init, "seconds": 0.0} for n in names
                if PROBES[n].stage == "rank"}
    out = _run(ctx, names, CheckOptions.coerce(opts), "rank")
    ctx.progress("done")
    return out


def run_check(nproc: int, names: list[str], backend: str | None, deadline_s: float,
              opts: CheckOptions | Mapping[str, object] | None = None,
              rank_env: dict[int, dict[str, str]] | None = None,
              on_progress: Callable[[dict[int, str]], None] | None = None) -> Report:
    """One node: start ``nproc`` ranks with the launcher and check them."""
    from ddpdoctor.check.launcher import launch

    options = CheckOptions.coerce(opts)
    parent = _run(None, names, options, "parent")
    if all(PROBES[n].stage == "parent" for n in names):
        # Nothing needs ranks: do not pay for starting them.
        report = Report("check", world={"world_size": nproc, "nodes": 1})
        analyze_probes({0: parent}, names, nproc, report, options)
        return report
    result = launch(run_probes, nproc=nproc, args=(names, options), backend=backend,
                    deadline_s=deadline_s, rank_env=rank_env, pre_init=run_pre_probes,
                    on_progress=on_progress)
    return assemble_report(result, names, options, parent)
