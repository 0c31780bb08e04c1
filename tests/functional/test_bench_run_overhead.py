"""Smoke test of benchmarks/bench_run_overhead.py: it runs, both launches write their step
files, the table has its rows, and nothing it started outlives it. No timing is asserted
(the numbers of a one-block run on a shared machine mean nothing)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.matrix]
BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_run_overhead.py"


@pytest.mark.timeout(240)
def test_quick_run_plain_and_supervised(tmp_path):
    keep, data = tmp_path / "keep", tmp_path / "runs.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--sizes", "20ms", "--variants", "run",
         "--steps", "20", "--watch-steps", "0", "--toggle-seconds", "0",
         "--keep", str(keep), "--json", str(data)],
        capture_output=True, text=True, timeout=220)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out

    runs = json.loads(data.read_text())["runs"]
    assert sorted(r["variant"] for r in runs) == ["plain", "plain", "run", "run"]
    assert all(r["code"] == 0 and r["files"] == 2 for r in runs), runs
    # the supervised job was watched (run's zero-code-change watch), the plain one not
    assert all(r["watched"] == (r["variant"] == "run") for r in runs), runs
    for variant in ("plain", "run"):
        files = sorted((keep / "steps").glob(f"20ms-b0-*-{variant}.rank*.json"))
        assert len(files) == 4, files  # 2 launches x 2 ranks
        for f in files:
            steps = json.loads(f.read_text())
            assert len(steps["wall"]) == len(steps["cpu"]) == 20

    header = next(i for i, line in enumerate(out.splitlines())
                  if "mean-step ratio [95%]" in line)
    table = out.splitlines()[header + 1:header + 3]
    assert re.match(r"\s*20ms\s+plain\s+1\s+[\d.]+\s+\(baseline\)", table[0]), out
    assert re.match(r"\s*20ms\s+run\s+1\s+[\d.]+\s+[\d.]+ \[nan, nan\]", table[1]), out
    assert "one block: no interval" in table[1]

    tmp = re.search(r"outputs in (\S+) \(removed at the end\)", out).group(1)
    assert not Path(tmp).exists()
    left = [p.pid for p in psutil.process_iter(["cmdline"])
            if any(tmp in a for a in (p.info["cmdline"] or []))]
    assert left == [], f"processes outlived the benchmark: {left}"
