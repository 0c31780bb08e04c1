"""The watch's per-rank step series files: the bounded writer and the page built from them."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from paths import TESTS

from ddpdoctor.core.report import Report
from ddpdoctor.report.page import render_page
from ddpdoctor.report.series import WATCH_STRATEGY, read_watch_series
from ddpdoctor.report.sources import collect_series
from ddpdoctor.watch.events import SERIES_NAME, series_path
from ddpdoctor.watch.series_file import SeriesRecord, SeriesWriter, interval

# Its process-starting tests run in `make test-e2e` (docs/development.md, "Two tiers").
pytestmark = pytest.mark.matrix

HERE = TESTS


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _rec(step: int, rank: int = 0, steps: int = 1, t: float = 0.1) -> SeriesRecord:
    return SeriesRecord(step=step, rank=rank, steps=steps, step_time_s=t, data_wait_s=0.01,
                        forward_s=t / 2, timed_steps=steps, rss_mb=100.0 + step)


def test_writer_halves_the_resolution_at_the_cap(tmp_path):
    path = tmp_path / SERIES_NAME.format(rank=0)
    w = SeriesWriter(str(path), cap=8)
    for step in range(1, 101):  # one step per heartbeat interval, 100 intervals
        w.add(_rec(step, t=0.1 if step % 2 else 0.3))
    w.flush()
    recs = _records(path)
    assert len(recs) <= 8
    steps = [r["step"] for r in recs]
    assert steps == sorted(set(steps)) and steps[-1] == 100
    # every step is counted once: the merged records span the whole run
    assert sum(r["steps"] for r in recs) == 100
    # 100 intervals into 8 records: halved 4 times; the records are spread evenly, each
    # spanning between half the stride and the stride (the last: the flushed remainder)
    assert w.stride == 16
    assert all(8 <= r["steps"] <= 16 for r in recs[:-1])
    # merging keeps the per-step mean: odd steps 0.1 s, even ones 0.3 s
    first = [0.1 if k % 2 else 0.3 for k in range(1, recs[0]["step"] + 1)]
    assert recs[0]["step_time_s"] == pytest.approx(sum(first) / len(first))
    assert recs[0]["rss_mb"] == 100.0 + recs[0]["step"]  # the interval's last sample


def test_writer_below_the_cap_keeps_every_interval(tmp_path):
    path = tmp_path / "s.jsonl"
    w = SeriesWriter(str(path), cap=8)
    for step in (3, 7, 12):
        w.add(_rec(step, steps=4))
    assert [r["step"] for r in _records(path)] == [3, 7, 12]
    assert w.stride == 1


def test_writer_refuses_a_planted_symlink(tmp_path):
    target = tmp_path / "victim"
    target.write_text("keep\n")
    path = tmp_path / "s.jsonl"
    path.symlink_to(target)
    w = SeriesWriter(str(path))
    w.add(_rec(1))
    assert w.failed and target.read_text() == "keep\n"


def test_interval_is_the_per_step_mean_since_the_last_sample():
    rec = interval((10, 1.0, 0.1, 0.2, 2), (20, 3.0, 0.3, 0.6, 6), 1, 200 * 2**20)
    assert (rec.step, rec.rank, rec.steps, rec.timed_steps) == (20, 1, 10, 4)
    assert rec.step_time_s == pytest.approx(0.2)
    assert rec.data_wait_s == pytest.approx(0.05) and rec.forward_s == pytest.approx(0.1)
    assert rec.rss_mb == 200.0
    untimed = interval((10, 1.0, 0.1, 0.2, 2), (12, 1.4, 0.1, 0.2, 2), 0, None)
    assert untimed.forward_s is None and untimed.data_wait_s is None
    assert interval((10, 1.0, 0.0, 0.0, 0), (10, 1.0, 0.0, 0.0, 0), 0, None) is None


def test_series_file_sits_beside_the_events_file(tmp_path):
    events = tmp_path / "watch-events.jsonl"
    assert series_path(str(events), 3) == str(tmp_path / "watch-series-rank3.jsonl")
    assert series_path(None, 3) is None


def _write_run(run_dir: Path, slow_rank: int = 1, world: int = 2) -> None:
    for rank in range(world):
        w = SeriesWriter(series_path(str(run_dir / "watch-events.jsonl"), rank))
        # the ranks' heartbeat threads sample at different steps
        for step in range(5 + rank, 60, 7):
            fwd = 0.30 if rank == slow_rank else 0.05
            w.add(SeriesRecord(step=step, rank=rank, steps=7, step_time_s=0.35,
                               data_wait_s=0.01, forward_s=fwd, timed_steps=7,
                               rss_mb=300.0 + rank))


def test_collect_series_builds_the_heatmap_from_the_watch_files(tmp_path):
    _write_run(tmp_path)
    report = Report(command="run", world={"run_dir": str(tmp_path)})
    series = collect_series(report, run_dir=str(tmp_path))
    assert len(series.steps) == 1
    s = series.steps[0]
    assert s.strategy == WATCH_STRATEGY and s.world == 2
    assert s.steps == sorted(s.steps) and len(s.steps) >= 7
    busy = s.rank_busy_s
    assert all(row[1] > row[0] for row in busy)  # the slow rank is the stripe
    assert s.rank_rss_mb[0] == [300.0, 301.0]
    assert not any("No per-rank step series" in n for n in series.notes)
    html = render_page(report, series)
    # heat map, data-wait share, memory; no loss or grad norm chart: the watch knows none
    assert html.count('class="chart"') == 3
    assert "gather (data + forward), seconds" in html
    assert "slowest is rank 1" in html
    assert "memory per rank (RSS on CPU, MB)" in html and "loss per rank" not in html


def test_torn_and_foreign_lines_are_skipped(tmp_path):
    _write_run(tmp_path)
    with open(tmp_path / "watch-series-rank0.jsonl", "a") as f:
        f.write('{"step": "x"}\nnot json\n{"schema": "ddpdoctor.watch-seri')
    s = read_watch_series(tmp_path)
    assert s is not None and s.world == 2
    assert read_watch_series(tmp_path / "nowhere") is None


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_run_html_draws_the_watch_series_of_an_ordinary_job(tmp_path):
    from run_helpers import run_doctor

    job = HERE / "fixtures" / "run_jobs" / "slow_rank_job.py"
    run_dir, page = tmp_path / "run", tmp_path / "page.html"
    # checks every 5 steps: the watch times every step (those before a check step)
    res = run_doctor(tmp_path, "--run-dir", str(run_dir), "--html", str(page), "--",
                     sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                     str(job), "40", "0.08",
                     env={"DDPDOCTOR_WATCH_EVERY": "5", "OMP_NUM_THREADS": "1",
                          # this checkout's ddpdoctor in the ranks, whatever pip installed
                          "PYTHONPATH": os.pathsep.join(
                              p for p in (str(HERE.parent), os.environ.get("PYTHONPATH"))
                              if p)},
                     timeout=200)
    assert res.returncode in (0, 1), res.stderr[-2000:]
    for rank in (0, 1):
        recs = _records(run_dir / SERIES_NAME.format(rank=rank))
        assert recs and recs[-1]["step"] == 40 and recs[-1]["rank"] == rank
        assert sum(r["steps"] for r in recs) == 40  # every step once, none twice
    s = read_watch_series(run_dir)
    assert s is not None and s.world == 2
    timed = [row for row in s.rank_busy_s if all(v == v for v in row)]
    assert timed and sum(r[1] > r[0] for r in timed) > len(timed) / 2  # rank 1 sleeps
    html = page.read_text()
    assert "gather (data + forward), seconds" in html and "slowest is rank 1" in html
    assert "memory per rank (RSS on CPU, MB)" in html
    assert "No per-rank step series" not in html
