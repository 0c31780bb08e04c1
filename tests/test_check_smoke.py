"""`ddpdoctor check` end to end through the CLI: the real pipeline on 2 CPU ranks."""

import json
import os
import signal
import subprocess

import pytest
from conftest import ddpdoctor_cmd

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(120)
def test_check_two_cpu_ranks_is_healthy(tmp_path):
    out = tmp_path / "report.json"
    proc = subprocess.Popen(ddpdoctor_cmd() + ["check", "--nproc", "2", "--json", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        stdout, _ = proc.communicate(timeout=100)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, stdout
    assert "[✓] connectivity: world all-reduce on 2 ranks ok" in stdout
    report = json.loads(out.read_text())
    assert report["schema"] == "ddpdoctor.report/1"
    assert report["command"] == "check"
    assert report["world"]["world_size"] == 2 and report["world"]["backend"] == "gloo"
    assert report["probes"]["connectivity"]["status"] == "ok"
    assert report["findings"] == []


def test_check_rejects_an_unknown_probe():
    proc = subprocess.run(ddpdoctor_cmd() + ["check", "--probe", "nope"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert "unknown probe(s) nope" in proc.stderr
