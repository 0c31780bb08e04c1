"""Where a page's data comes from: a report JSON, a run directory, the files beside them."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ddpdoctor.core.contract import (
    EVENTS,
    EVENTS_FILE,
    FR_SUBDIR,
    HEARTBEAT_SUBDIR,
    REPORT_FILES,
    REPORT_SCHEMA,
    SERIES_GLOB,
    TRAIN_LOG_FILES,
)
from ddpdoctor.core.report import Report
from ddpdoctor.report import series as S

REPORT_NAMES = REPORT_FILES
EVENTS_NAME = EVENTS_FILE
TRAIN_LOG_NAMES = TRAIN_LOG_FILES


class SourceError(ValueError):
    """The input is not a report or a run directory: one line, exit 2."""


def load_report(path: str | os.PathLike) -> Report:
    """A ``--json`` report file, or the report inside a run directory; a run directory
    without one becomes a report of what its watch events hold."""
    p = Path(path)
    if p.is_dir():
        for name in REPORT_NAMES:
            if (p / name).is_file():
                return _read(p / name)
        return _report_from_run_dir(p)
    if not p.exists():
        raise SourceError(f"no such file or directory: {p}")
    return _read(p)


def _read(p: Path) -> Report:
    try:
        data = json.loads(S._read_bytes(p).decode("utf-8", "replace"))
    except (OSError, ValueError) as e:
        raise SourceError(f"{p}: not a ddpdoctor JSON report ({e})") from None
    except RecursionError:  # json's decoder recurses: '[' * 100000
        raise SourceError(f"{p}: not a ddpdoctor JSON report (nested too deeply)") from None
    if _depth(data) > MAX_DEPTH:  # the scrub and the page recurse too: refuse it here
        raise SourceError(f"{p}: not a ddpdoctor JSON report (nested deeper than "
                          f"{MAX_DEPTH} levels)")
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith(
            REPORT_SCHEMA.rsplit("/", 1)[0] + "/"):
        raise SourceError(f"{p}: not a ddpdoctor JSON report (no ddpdoctor.report schema)")
    try:
        report = Report.from_dict(data)
    except (KeyError, ValueError, TypeError) as e:
        raise SourceError(f"{p}: malformed report ({type(e).__name__}: {e})") from None
    report.exit_override = data.get("exit_code") if isinstance(data.get("exit_code"), int) \
        else None
    return report


# A real report is nested about 8 levels deep (world -> probes -> data -> lists).
MAX_DEPTH = 100


def _depth(data: object) -> int:
    """How deeply ``data`` nests lists and dicts, without recursing."""
    deepest, todo = 0, [(data, 1)]
    while todo:
        obj, level = todo.pop()
        if isinstance(obj, dict | list):
            deepest = max(deepest, level)
            if deepest > MAX_DEPTH:
                return deepest
            todo.extend((v, level + 1) for v in (obj.values() if isinstance(obj, dict)
                                                  else obj))
    return deepest


def _report_from_run_dir(run_dir: Path) -> Report:
    from ddpdoctor.core.report import Check
    from ddpdoctor.run.watch_events import watch_findings

    events = run_dir / EVENTS_NAME
    if not events.is_file() and not (run_dir / HEARTBEAT_SUBDIR).is_dir():
        raise SourceError(f"{run_dir}: no report.json, {EVENTS_NAME} or heartbeat/ in it: "
                          "not a ddpdoctor run directory")
    report = Report(command="run", world={"run_dir": str(run_dir)})
    report.duration_s = 0.0
    report.checks.append(Check(
        "run directory", f"rebuilt from {run_dir} (no report.json: the job's outcome, hang "
        "diagnosis and crash triage are in the report run printed or wrote with --json)",
        status="warning", group="run"))
    for f in watch_findings(events) if events.is_file() else []:
        report.add(f, check="watch")
    return report


def collect_series(report: Report, run_dir: str | os.PathLike | None = None,
                   json_logs: list[str] | None = None) -> S.RunSeries:
    """Every series found for ``report``: the trainer's JSON log(s), the watch events, the
    Flight Recorder dumps and heartbeats of its run directory. What is absent is noted."""
    out = S.RunSeries()
    # A run directory named by the caller wins over the paths recorded in the report: the
    # directory may have been copied elsewhere (attached to a ticket, say).
    explicit = run_dir is not None
    run_dir = run_dir or report.world.get("run_dir")
    watch = next((c for c in report.checks if c.name == "watch"), None)
    wdata = watch.data if watch else {}

    def where(key: str, name: str) -> str | None:
        if run_dir and (explicit or not wdata.get(key)):
            return str(Path(run_dir) / name)
        return wdata.get(key)

    _read_train_logs(out, run_dir, json_logs)
    events = where("events", EVENTS_NAME)
    if events and Path(events).is_file():
        try:
            out.events = S.read_watch_events(events)
        except OSError as e:
            out.notes.append(f"cannot read the watch events {events}: {e.strerror or e}")
    if not out.steps:
        # the watch writes its step series beside its events file (watch/events.py)
        _read_watch_steps(out, [run_dir, events and Path(events).parent])
    fr_dir = where("fr_dir", FR_SUBDIR)
    if fr_dir and Path(fr_dir).is_dir():
        out.fr = S.read_fr_dir(fr_dir)
    hb_dir = where("heartbeat_dir", HEARTBEAT_SUBDIR)
    if hb_dir and Path(hb_dir).is_dir():
        out.heartbeats = S.read_heartbeats(hb_dir)
    if report.command in ("run", "train") and not out.steps:
        out.notes.append(
            f"No per-rank step series: no {SERIES_GLOB} in the run directory (the "
            f"watch writes them beside its events file: {EVENTS}) and no trainer "
            "--json-log (ddpdoctor report RUN_DIR --json-log PATH, or "
            f"RUN_DIR/{TRAIN_LOG_FILES[0]}).")
    return out


def _read_train_logs(out: S.RunSeries, run_dir: str | os.PathLike | None,
                     json_logs: list[str] | None) -> None:
    """The trainer's JSON logs: those named, then those in the run directory."""
    logs = list(json_logs or [])
    if run_dir:
        logs += [str(Path(run_dir) / n) for n in TRAIN_LOG_NAMES if (Path(run_dir) / n).is_file()]
    for log in logs:
        try:
            out.steps += S.read_json_log(log)
        except OSError as e:
            out.notes.append(f"cannot read the training log {log}: {e.strerror or e}")


def _read_watch_steps(out: S.RunSeries, candidates: list) -> None:
    """The watch's step series from the first of ``candidates`` (directories) holding one."""
    for d in dict.fromkeys(str(x) for x in candidates if x):
        if not Path(d).is_dir():
            continue
        try:
            watch_steps = S.read_watch_series(d)
        except OSError as e:
            out.notes.append(f"cannot read the watch step series in {d}: {e.strerror or e}")
            continue
        if watch_steps is not None:
            out.steps.append(watch_steps)
            return
