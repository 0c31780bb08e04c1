"""``run --profile``: the ranks' profile windows in the report (one check line, the
per-rank top operators and step split in its data, the trace paths)."""

from __future__ import annotations

from ddpdoctor.core.findings import format_ranks
from ddpdoctor.core.profiled import ProfileWindow, read_all
from ddpdoctor.core.report import Check, Report

CHECK = "profile"


def _share(w: ProfileWindow) -> str:
    total = sum(o.self_cpu_ms + o.self_device_ms for o in w.top) or 1.0
    o = w.top[0]
    return f"{o.name} {100 * (o.self_cpu_ms + o.self_device_ms) / total:.0f}%"


def _split(w: ProfileWindow) -> str:
    if w.step_ms is None:
        return "steps untimed"
    parts = [f"step {w.step_ms:.1f} ms"]
    if w.data_ms is not None:
        parts.append(f"data {w.data_ms:.1f} ms")
    if w.forward_ms is not None and w.forward_ms > 0:
        parts.append(f"forward {w.forward_ms:.1f} ms")
    return ", ".join(parts)


def add_profile(report: Report, directory: str, group: str) -> None:
    windows = read_all(directory)
    if not windows:
        return
    first = windows[0]
    lead = "; ".join(f"rank {w.rank}: {_share(w)} of the top operators' time, {_split(w)}"
                     for w in windows[:4] if w.top)
    summary = (f"ranks {format_ranks([w.rank for w in windows])} profiled steps "
               f"{first.first_step}-{first.first_step + first.steps - 1}"
               + (f"; {lead}" if lead else "") + f"; traces in {directory}")
    report.checks.append(Check(CHECK, summary, group=group, data={
        "ranks": {str(w.rank): {"step_ms": w.step_ms, "data_ms": w.data_ms,
                                "forward_ms": w.forward_ms, "trace": w.trace,
                                "top": [{"name": o.name, "calls": o.calls,
                                         "self_cpu_ms": o.self_cpu_ms,
                                         "self_device_ms": o.self_device_ms}
                                        for o in w.top]}
                  for w in windows}}))
