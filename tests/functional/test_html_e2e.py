"""End to end: the real commands with --html, each page opened in headless Chromium.

`check --nproc 2`, `train --inject straggler@1 --watch` and a hung `run` (rank 0 computes
forever at step 2) start side by side as `ddpdoctor` subprocesses (a module fixture), so
their torchrun start-ups overlap: ~1-2 min on 2 busy cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from html_browser import chromium, open_page  # noqa: F401  (chromium: a session fixture)
from run_helpers import RunJob, doctor, kill_tree, trainer

# the fixture's three launches take ~90 s on 2 busy cores
pytestmark = [pytest.mark.matrix, pytest.mark.slow, pytest.mark.timeout(420)]
DEADLINE_S = 300


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    base = tmp_path_factory.mktemp("html-e2e")
    env = dict(os.environ, TMPDIR=str(base), OMP_NUM_THREADS="1")
    procs = {}
    runs = {
        "check": [*doctor(), "check", "--nproc", "2", "--json", str(base / "check.json"),
                  "--html", str(base / "check.html")],
        "train": [*doctor(), "train", "--steps", "14", "--inject", "straggler@1", "--watch",
                  "--html", str(base / "train.html")],
    }
    hang = RunJob("hang", base / "hang", trainer("--steps", "50", "--inject",
                                                 "hang-compute@0:2"),
                  ["--hang-timeout", "6", "--kill-grace", "2", "--html",
                   str(base / "hang.html")])
    try:
        for name, cmd in runs.items():
            with open(base / f"{name}.out", "wb") as out:
                procs[name] = subprocess.Popen(cmd, env=env, stdout=out,
                                               stderr=subprocess.STDOUT, cwd=base,
                                               start_new_session=True)
        hang.start()
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            if all(p.poll() is not None for p in procs.values()) and hang.poll() is not None:
                break
            time.sleep(0.5)
    finally:
        for p in procs.values():
            kill_tree(p.pid)
        hang.kill()
    codes = {name: p.returncode for name, p in procs.items()}
    codes["hang"] = hang.returncode
    return base, codes, hang


def _out(base, name):
    return (base / f"{name}.out").read_text(errors="replace")[-3000:]


def test_check_html(pages, chromium):  # noqa: F811
    base, codes, _ = pages
    assert codes["check"] in (0, 1), _out(base, "check")
    report = json.loads((base / "check.json").read_text())
    opened = open_page(chromium, str(base / "check.html"))
    assert opened.errors == [] and opened.console == []
    bandwidth = report["probes"]["bandwidth"]
    assert bandwidth["status"] != "skipped", bandwidth["summary"]
    assert opened.charts == opened.drawn == 2  # the sweep and the link matrix
    assert "bus bandwidth vs message size" in opened.dom


def test_train_html_shows_the_straggler(pages, chromium):  # noqa: F811
    base, codes, _ = pages
    assert codes["train"] == 0, _out(base, "train")
    html = (base / "train.html").read_text()
    assert "STRAGGLER" in html and "Culprit: <strong>rank 1</strong>" in html
    assert "slowest is rank 1" in html
    opened = open_page(chromium, str(base / "train.html"))
    assert opened.errors == [] and opened.console == []
    assert opened.charts == opened.drawn == 5


def test_hung_run_html_names_the_culprit(pages, chromium):  # noqa: F811
    base, codes, hang = pages
    assert codes["hang"] == 1, (hang.tmp / "doctor.out").read_text(errors="replace")[-3000:]
    report = json.loads(hang.json_path.read_text())
    assert [(f["id"], f["ranks"]) for f in report["findings"]][:1] == [
        ("HANG_RANK_MISSING_COLLECTIVE", [0])]
    html = (base / "hang.html").read_text()
    assert "Culprit: <strong>rank 0</strong>" in html
    assert '<li class="frame culprit' in html and "your line" in html
    opened = open_page(chromium, str(base / "hang.html"))
    assert opened.errors == [] and opened.console == []
    assert opened.drawn == opened.charts
