"""`ddpdoctor check` deadlines hold whatever a rank does, and a stuck rank is named by the
step it was in. Each test stops a real process (SIGSTOP) inside a real check."""

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from jobs import check_ranks_of

from ddpdoctor.check.analysis.bandwidth import analyze as analyze_bandwidth
from ddpdoctor.check.run import run_check

pytestmark = [pytest.mark.matrix, pytest.mark.slow]


def _ranks_of(pid: int) -> list[psutil.Process]:
    return check_ranks_of(pid)


def _dataloader_workers(rank: psutil.Process) -> list[psutil.Process]:
    out = []
    for c in rank.children():
        try:
            if "resource_tracker" not in " ".join(c.cmdline()):
                out.append(c)
        except psutil.NoSuchProcess:
            continue
    return out


# A check whose DataLoader probe runs long (many batches, its own timeout beyond the
# deadline), driven like `ddpdoctor check --json` (run_check + finish) with stdout a pipe.
DATALOADER_CHECK = """
import sys
from ddpdoctor.commands.common import finish
from ddpdoctor.check.run import run_check
if __name__ == "__main__":
    report = run_check(2, ["dataloader"], "gloo", float(sys.argv[1]),
                       opts={"dl_batches": 2000, "dl_item_bytes": 1 << 20,
                             "dl_timeout_s": 600})
    raise SystemExit(finish(report, sys.argv[2]))
"""


@pytest.mark.timeout(200)
def test_stopped_dataloader_worker_cannot_stretch_the_deadline(tmp_path):
    """Torch's teardown waits forever on a stopped DataLoader worker; the launcher kills the
    tree itself, the pipe closes (no orphan holds it) and the finding names the DataLoader
    step on rank 1, not connectivity."""
    deadline = 45
    out = tmp_path / "report.json"
    script = tmp_path / "dl_check.py"
    script.write_text(DATALOADER_CHECK)
    proc = subprocess.Popen([sys.executable, str(script), str(deadline), str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    start = time.monotonic()
    stopped = None
    try:
        while stopped is None and time.monotonic() - start < deadline:
            ranks = _ranks_of(proc.pid)
            if len(ranks) >= 2:
                workers = _dataloader_workers(ranks[1])
                if workers:
                    workers[0].send_signal(signal.SIGSTOP)
                    stopped = workers[0]
            time.sleep(0.01)
        assert stopped, "rank 1 never started its DataLoader workers"
        # communicate() waits for EOF: a stopped orphan holding stdout would block it.
        stdout, _ = proc.communicate(timeout=deadline + 60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, stdout
    report = json.loads(out.read_text())
    # From the ranks' start to the report (start-up on a loaded machine is not counted).
    assert report["duration_s"] < deadline + 10, report["duration_s"]
    ids = [(f["id"], f["ranks"]) for f in report["findings"]]
    assert ids == [("DATALOADER_WORKER_FAILURE", [1])], report["findings"]
    ev = report["findings"][0]["evidence"]
    if "running" in ev:
        # the deadline hit while rank 1 waited on its stopped worker
        assert ev["running"]["1"] == "dataloader"
        assert ev["stopped_children"]["1"] == [stopped.pid]
        assert "did not finish dataloader" in report["findings"][0]["title"]
    else:
        # on a loaded machine rank 1's DataLoader may notice first that the worker is gone
        # (the launcher's teardown kills it) and report that itself: the same finding from
        # the probe's own evidence, the worker's failure as the error
        assert ev["error"] and ev["workers"] >= 1, ev
    assert not stopped.is_running() or stopped.status() == psutil.STATUS_ZOMBIE


@pytest.mark.timeout(150)
def test_rank_stopped_inside_the_bandwidth_sweep_is_named_with_the_probe():
    deadline = 60.0  # rank start-up counts: generous on a loaded machine
    stopped: list[int] = []

    def stop_rank1_in_bandwidth(steps: dict[int, str]) -> None:
        if stopped or not (steps.get(1) or "").startswith("bandwidth"):
            return
        rank1 = _ranks_of(os.getpid())[1]
        rank1.send_signal(signal.SIGSTOP)
        stopped.append(rank1.pid)

    report = run_check(2, ["bandwidth"], "gloo", deadline, opts={"max_bytes": 256 << 20},
                       on_progress=stop_rank1_in_bandwidth)
    if not stopped:
        pytest.skip("the sweep finished before the parent saw rank 1 in it")
    assert report.finish().duration_s < deadline + 10
    assert [(f.id, f.ranks) for f in report.findings] == [("COMM_CONNECTIVITY", [1])]
    f = report.findings[0]
    assert "did not finish bandwidth" in f.title and "(a collective)" in f.title
    assert f.evidence["running"][1].startswith("bandwidth")
    assert f.evidence["process_state"][1] == "stopped"
    assert f.evidence["pids"][1] == stopped[0]
    assert report.exit_code == 1
    bw = next(c for c in report.checks if c.name == "bandwidth")
    assert report.check_status(bw) == "error"
    assert not psutil.pid_exists(stopped[0]) or \
        psutil.Process(stopped[0]).status() == psutil.STATUS_ZOMBIE


def test_bandwidth_analysis_with_a_rank_that_sent_nothing():
    """Rank 0 measured its link from rank 1, rank 1 (stopped) sent no data: the analysis
    keeps what it can instead of raising KeyError."""
    rank0 = {"host": "n0", "nic": {"speed_mbps": 10000},
             "sweep": [{"collective": "all_reduce", "size": 1 << 20, "median_s": 0.002}],
             "links_in": {"1": 0.5}}
    check, findings = analyze_bandwidth({0: rank0}, 2, opts={"backend": "gloo"})
    assert findings == []
    assert check.data["links_gbps"] == {"1->0": 0.5}
