"""`ddpdoctor check` end to end through the CLI: the real pipeline on 2 CPU ranks."""

import json
import subprocess

import pytest
from jobs import ddpdoctor_cmd, run_job

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(180)
def test_check_two_cpu_ranks_is_healthy_with_every_probe_reported(tmp_path):
    out = tmp_path / "report.json"
    rc, stdout = run_job(ddpdoctor_cmd() + ["check", "--nproc", "2", "--json", str(out)],
                         timeout=170)
    assert rc == 0, stdout
    assert "[✓] connectivity: all-reduce on 2 ranks ok" in stdout
    assert "busbw (GB/s)" in stdout  # the nccl-tests-style table
    for group in ("Environment", "Communication", "Data", "GPU", "Topology"):
        assert stdout.count(f"\n{group}\n") == 1, f"{group} heading not exactly once"
    report = json.loads(out.read_text())
    assert report["schema"] == "ddpdoctor.report/1"
    assert report["command"] == "check"
    assert report["world"]["world_size"] == 2 and report["world"]["backend"] == "gloo"
    from ddpdoctor.check.run import PROBES

    statuses = {name: p["status"] for name, p in report["probes"].items()}
    checks_of = {"env": ["versions", "known bugs", "env vars", "socket config", "shm",
                         "limits"]}
    for probe in PROBES:
        for name in checks_of.get(probe, [probe]):
            assert name in statuses, f"probe {name} not reported"
    gpu_like = {n for n in ("gpu",) if n in statuses}
    for name, status in statuses.items():
        assert status == ("skipped" if name in gpu_like else "ok"), (name, status)
    assert report["findings"] == [], report["findings"]


def test_check_rejects_an_unknown_probe():
    proc = subprocess.run(ddpdoctor_cmd() + ["check", "--probe", "nope"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert "unknown probe(s) nope" in proc.stderr
