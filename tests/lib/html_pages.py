"""Shared by the HTML tests: the recorded fixtures and the 64-rank synthetic job as pages."""

from __future__ import annotations

import sys
from pathlib import Path

from paths import TESTS

from ddpdoctor.core.report import Report
from ddpdoctor.report.page import render_page
from ddpdoctor.report.series import RunSeries, read_json_log, read_watch_events
from ddpdoctor.report.sources import collect_series, load_report

HERE = TESTS
FIXTURES = HERE / "fixtures" / "html"
LOGS = HERE / "fixtures" / "logs"
sys.path.insert(0, str(HERE.parent / "benchmarks"))

import bench_html  # noqa: E402


def check_page() -> tuple[Report, str]:
    """A real `ddpdoctor check --nproc 2 --json` of this machine (healthy)."""
    report = load_report(FIXTURES / "check-2ranks.json")
    return report, render_page(report, collect_series(report))


def train_page() -> tuple[Report, RunSeries, str]:
    """A real `ddpdoctor train --inject straggler@1 --watch` run: its --json-log and the
    watch's events (STRAGGLER on rank 1 at step 10)."""
    from ddpdoctor.report.train_report import train_report

    log = str(FIXTURES / "train-straggler.jsonl")
    events = str(FIXTURES / "train-straggler-events.jsonl")
    report = train_report(0, log, events, ["ddpdoctor", "train"])
    series = RunSeries(steps=read_json_log(log), events=read_watch_events(events))
    return report, series, render_page(report, series)


def hang_page() -> tuple[Report, RunSeries, str]:
    """A real `ddpdoctor run` of 3 ranks, rank 1 alone in a side all_reduce (lone-collective
    @1:2): its --json report and run directory (Flight Recorder dumps, heartbeats, log)."""
    run_dir = FIXTURES / "run-hang"
    report = load_report(run_dir)
    series = collect_series(report, run_dir=str(run_dir))
    return report, series, render_page(report, series)


def synthetic_pages(tmp: Path) -> dict[str, str]:
    return bench_html.pages(64, 2000, tmp)
