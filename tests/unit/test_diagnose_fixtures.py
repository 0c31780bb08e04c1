"""diagnose on logs recorded from real 2-rank gloo runs (and real-shaped GPU logs).

Each case: the fault planted, the first finding id and its culprit rank(s), the other ids
that must come out, and what the evidence must quote. See tests/fixtures/logs/README.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpdoctor.diagnose import LogInput, diagnose_logs

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"


def diagnose(*names: str):
    findings, scan = diagnose_logs([LogInput(str(LOGS / n)) for n in names])
    return findings, scan


CASES = [
    # (logs, first id, first ranks, all ids in order)
    (["exception.log"], "RANK_CRASHED", [1], ["RANK_CRASHED"]),
    # SIGKILL and nothing else: the host's OOM killer in the public reports (unconfirmed).
    (["sigkill.log"], "OOM", [1], ["OOM"]),
    # The reduction error's text names its cause, unused parameters: that finding leads.
    (["unused_params.log"], "DDP_UNUSED_PARAMETERS", [0, 1],
     ["DDP_UNUSED_PARAMETERS", "DDP_REDUCTION_NOT_FINISHED"]),
    (["unused_params_info.log"], "DDP_UNUSED_PARAMETERS", [0, 1],
     ["DDP_UNUSED_PARAMETERS", "DDP_REDUCTION_NOT_FINISHED"]),
    (["dataloader_bus.log"], "ENV_SHM_TOO_SMALL", [1],
     ["ENV_SHM_TOO_SMALL", "DATALOADER_WORKER_FAILURE"]),
    (["dataloader_bus_signal.log"], "ENV_SHM_TOO_SMALL", [1],
     ["ENV_SHM_TOO_SMALL", "DATALOADER_WORKER_FAILURE"]),
    (["dataloader_bus_tee.log"], "ENV_SHM_TOO_SMALL", [1],
     ["ENV_SHM_TOO_SMALL", "DATALOADER_WORKER_FAILURE"]),
    (["shm_small.log"], "ENV_SHM_TOO_SMALL", [0, 1],
     ["ENV_SHM_TOO_SMALL", "DATALOADER_WORKER_FAILURE"]),
    (["dataloader_exit.log"], "DATALOADER_WORKER_FAILURE", [1], ["DATALOADER_WORKER_FAILURE"]),
    (["dataloader_exit_connreset.log"], "DATALOADER_WORKER_FAILURE", [1],
     ["DATALOADER_WORKER_FAILURE"]),
    (["dataloader_timeout.log"], "DATALOADER_WORKER_FAILURE", [1], ["DATALOADER_WORKER_FAILURE"]),
    # a worker killed while the rank read the queue: EOFError there, and the rank's
    # stderr lost as it died (the exception only in CPython's object dump)
    (["dataloader_kill_lost_stderr/rank0.log", "dataloader_kill_lost_stderr/rank1.log"],
     "DATALOADER_WORKER_FAILURE", [1], ["DATALOADER_WORKER_FAILURE"]),
    # raised while the DataLoader built its workers: they never ran
    (["dataloader_unpicklable.log"], "DATALOADER_WORKER_FAILURE", [1],
     ["DATALOADER_WORKER_FAILURE"]),
    # the Dataset's own code raised in a worker: the rank died of that error
    (["dataloader_raises.log"], "RANK_CRASHED", [1], ["RANK_CRASHED"]),
    # the same place out of descriptors: the limit is the cause, not the loader
    (["dataloader_nofile.log"], "ENV_LIMITS", [1], ["ENV_LIMITS"]),
    (["mismatch_detail.log"], "HANG_COLLECTIVE_MISMATCH", [0, 1], ["HANG_COLLECTIVE_MISMATCH"]),
    (["size_mismatch.log"], "HANG_COLLECTIVE_MISMATCH", [0], ["HANG_COLLECTIVE_MISMATCH"]),
    (["op_mismatch.log"], "COLLECTIVE_TIMEOUT", [], ["COLLECTIVE_TIMEOUT"]),
    (["monitored_barrier.log"], "COLLECTIVE_TIMEOUT", [1], ["COLLECTIVE_TIMEOUT"]),
    (["missing_init.log"], "COLLECTIVE_TIMEOUT", [1], ["COLLECTIVE_TIMEOUT"]),
    (["nan_anomaly.log"], "GRAD_NONFINITE", [1], ["GRAD_NONFINITE"]),
    (["nan_clip.log"], "GRAD_NONFINITE", [1], ["GRAD_NONFINITE"]),
    (["port_in_use.log"], "ENV_PORT_IN_USE", [], ["ENV_PORT_IN_USE"]),
    (["rendezvous_unreachable.log"], "ENV_RENDEZVOUS_UNREACHABLE", [],
     ["ENV_RENDEZVOUS_UNREACHABLE"]),
    (["logdir_exception/console.log", "logdir_exception/job42/attempt_0/0/stderr.log",
      "logdir_exception/job42/attempt_0/1/stderr.log"], "RANK_CRASHED", [1], ["RANK_CRASHED"]),
    (["recorded/nccl_watchdog_desync.log"], "COLLECTIVE_TIMEOUT", [3], ["COLLECTIVE_TIMEOUT"]),
    (["recorded/cuda_oom.log"], "OOM", [2], ["OOM"]),
    # recorded on an H200 by `make gpu-verify` (docs/gpu-verified.md)
    (["recorded/cuda_oom_nvidia_h200.log"], "OOM", [0], ["OOM"]),
    (["recorded/nccl_duplicate_gpu_nvidia_h200.log"], "GPU_DEVICE_MAPPING", [0, 1],
     ["GPU_DEVICE_MAPPING"]),
    (["cpu_oom.log"], "OOM", [1], ["OOM"]),
    (["recorded/host_oom_train.log", "recorded/host_oom_dmesg.txt"], "OOM", [1], ["OOM"]),
    (["recorded/host_oom_train.log"], "OOM", [1], ["OOM"]),
]


@pytest.mark.parametrize("logs,first_id,first_ranks,ids", CASES,
                         ids=[c[0][-1].replace("/", "_") for c in CASES])
def test_fixture_findings(logs, first_id, first_ranks, ids):
    findings, _ = diagnose(*logs)
    assert [f.id for f in findings] == ids
    assert findings[0].id == first_id
    assert findings[0].ranks == first_ranks
    assert all(f.severity == "error" for f in findings)
    ev = findings[0].evidence
    assert ev["lines"] and ":" in ev["first_seen"]
    # first_seen is a real file:line that holds the quoted text
    src, lineno = ev["first_seen"].rsplit(":", 1)
    text = Path(src).read_bytes().split(b"\n")[int(lineno) - 1]
    assert text.strip()


def test_exception_names_user_line_and_collapses_cascade():
    findings, _ = diagnose("exception.log")
    f = findings[0]
    assert f.evidence["exception"] == "ValueError: bad batch at step 2: label out of range"
    assert f.evidence["where"].endswith("faults.py:68 in train_loop")
    assert f.evidence["exit_code"] == 1
    fallout = " | ".join(f.evidence["fallout"])
    assert "'Connection closed by peer' on rank 0" in fallout
    assert "stopped rank 0 (SIGTERM)" in fallout


def test_unused_parameters_names_and_indices():
    findings, _ = diagnose("unused_params_info.log")
    unused = findings[0].evidence["parameters"]
    assert unused["1"]["names"] == ["unused_head.bias", "unused_head.weight"]
    assert unused["0"]["indices"] == [2, 3]
    findings, _ = diagnose("unused_params.log")
    assert findings[0].evidence["parameters"]["1"] == {"indices": [2, 3]}
    assert "TORCH_DISTRIBUTED_DEBUG=INFO" in findings[0].evidence["hint"]


def test_bus_error_signal_names_the_signal():
    findings, _ = diagnose("dataloader_bus_signal.log")
    assert findings[1].evidence["signal"] == "Bus error"
    assert "killed by signal: Bus error" in " ".join(findings[0].evidence["lines"])


def test_sigkill_without_oom_evidence_is_a_probable_oom_with_a_hint():
    findings, _ = diagnose("sigkill.log")
    ev = findings[0].evidence
    assert ev["exit_code"] == -9 and ev["confirmed"] is False
    assert "dmesg" in ev["hint"] and "most likely" in findings[0].title


def test_cuda_oom_sizes():
    ev = diagnose("recorded/cuda_oom.log")[0][0].evidence
    assert ev["tried_to_allocate"] == "2.50 GiB"
    assert ev["total_capacity"] == "79.19 GiB" and ev["free"] == "1.06 GiB" and ev["gpu"] == 2
    assert ev["where"].endswith("train.py:118 in main")
    assert any("NCCL watchdog timeout(s) on rank 0-1,3" in x for x in ev["fallout"])


def test_host_oom_matches_the_killed_pid():
    ev = diagnose("recorded/host_oom_train.log", "recorded/host_oom_dmesg.txt")[0][0].evidence
    assert ev["kind"] == "host" and "9021" in ev["pid_match"]


def test_mismatch_detail_names_both_collectives():
    ev = diagnose("mismatch_detail.log")[0][0].evidence
    assert ev["collectives"]["0"]["op"] == "ALLREDUCE"
    assert ev["collectives"]["1"]["op"] == "BROADCAST"


def test_store_timeout_names_missing_rank_and_size_mismatch_sizes():
    ev = diagnose("missing_init.log")[0][0].evidence
    assert ev["keys"] == "/default_pg/0//cpu//0/1"
    ev = diagnose("size_mismatch.log")[0][0].evidence
    assert (ev["received_bytes"], ev["expected_bytes"]) == (8, 4)
    assert ev["signal"] == "SIGABRT"


def test_per_rank_files_get_their_rank_from_the_path():
    _, scan = diagnose("logdir_exception/job42/attempt_0/1/stderr.log")
    assert {e.rank for e in scan.events} == {1}


def test_port_and_endpoint():
    assert diagnose("port_in_use.log")[0][0].evidence["port"] == 29733
    ev = diagnose("rendezvous_unreachable.log")[0][0].evidence
    assert ev["endpoint"] == "127.0.0.1:29799"
