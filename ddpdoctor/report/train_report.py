"""``ddpdoctor train --html``: the trainer writes no Report of its own; this builds one from
what its ranks wrote (the --json-log summary, the watch's events) and torchrun's exit code."""

from __future__ import annotations

import json
import os

from ddpdoctor.core.report import Check, Report


def train_report(returncode: int, json_log: str, events_path: str | None,
                 command: list[str]) -> Report:
    report = Report(command="train", world={"command": " ".join(command)})
    report.exit_override = returncode
    summaries = _read_summaries(report, json_log)
    for s in summaries:
        report.world.setdefault("world_size", s.get("world"))
        report.checks.append(_summary_check(s, json_log))
    if summaries:
        report.duration_s = round(sum(float(s.get("time_s") or 0) for s in summaries), 3)
    report.checks.append(Check(
        "exit", f"torchrun exited {returncode}", group="train",
        status="ok" if returncode == 0 else "error"))
    _add_watch(report, events_path)
    return report


def _read_summaries(report: Report, json_log: str) -> list[dict]:
    """The trainer's summary records (one per strategy); a log that cannot be read is a
    skipped check on ``report``."""
    from ddpdoctor.report.series import _read_lines

    summaries = []
    try:
        for line in _read_lines(json_log):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("event") == "summary":
                summaries.append(rec)
    except OSError as e:
        report.checks.append(Check("training log", f"skipped: cannot read {json_log}: "
                                   f"{e.strerror or e}", "skipped", "train"))
    return summaries


def _summary_check(s: dict, json_log: str) -> Check:
    return Check(
        f"{s.get('strategy')}",
        f"{s.get('steps')} steps in {float(s.get('time_s') or 0):.2f} s, "
        f"loss {float(s.get('first_loss') or 0):.4f} -> "
        f"{float(s.get('final_loss') or 0):.4f}"
        f" ({'down' if s.get('loss_down') else 'NOT down'}), "
        f"{float(s.get('tokens_per_s') or 0):,.0f} tok/s", group="train",
        status="ok" if s.get("loss_down") else "warning", data={"json_log": json_log})


def _add_watch(report: Report, events_path: str | None) -> None:
    """The watch's check line and its findings."""
    from ddpdoctor.run.watch_events import watch_findings

    if events_path is None:
        report.checks.append(Check("watch", "skipped: in-training checks off (add --watch)",
                                   "skipped", "train"))
        return
    found = watch_findings(events_path) if os.path.isfile(events_path) else []
    report.checks.append(Check("watch", "in-training checks on; " + (
        "found " + ", ".join(sorted({f.id for f in found})) if found else "nothing found"),
        group="train", data={"events": events_path}))
    for f in found:
        report.add(f, check="watch")
