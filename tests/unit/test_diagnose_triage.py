"""Triage on hand-written log text: cascade vs root cause, collapsing, odd inputs."""

from __future__ import annotations

import io

from ddpdoctor.diagnose import scan_stream, triage


def run(text: str, name: str = "job.log"):
    events, _ = scan_stream(io.BytesIO(text.encode()), name)
    return triage(events)


RESET = ("[rank{r}]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read "
         "error [10.0.0.{r}]:2345: Connection reset by peer\n")


def test_cascade_is_collapsed_into_counts_on_the_root_cause():
    resets = [RESET.format(r=r) for r in (0, 2, 3) for _ in range(5)]
    text = "".join(resets[:7]) + "[rank1]: KeyError: 'label'\n" + "".join(resets[7:])
    findings = run(text)
    assert [(f.id, f.ranks) for f in findings] == [("RANK_CRASHED", [1])]
    assert findings[0].evidence["fallout"] == [
        "15 'Connection reset by peer' on rank 0,2-3 were fallout (first at job.log:1)"]


def test_only_cascade_in_the_logs():
    findings = run("".join(RESET.format(r=r) for r in (0, 2)))
    assert [(f.id, f.ranks) for f in findings] == [("RANK_CRASHED", [])]
    assert "pass every rank's log" in findings[0].evidence["hint"]


def test_watchdog_timeouts_without_a_culprit():
    line = ("[rank{r}]:[E ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=80078, OpType=BROADCAST, NumelIn=5056, "
            "NumelOut=5056, Timeout(ms)=600000) ran for 600026 milliseconds before timing out.\n")
    findings = run("".join(line.format(r=r) for r in range(4)))
    assert [(f.id, f.ranks) for f in findings] == [("COLLECTIVE_TIMEOUT", [])]
    ev = findings[0].evidence
    assert ev["collective"] == {"op": "BROADCAST", "seq": 80078, "timeout_ms": 600000,
                                "ran_ms": 600026}
    assert ev["ranks_reporting"] == "0-3"


def test_unprefixed_old_style_watchdog_line_takes_rank_from_message():
    findings = run("[E ProcessGroupNCCL.cpp:737] [Rank 6] Watchdog caught collective operation "
                   "timeout: WorkNCCL(SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000) ran "
                   "for 1802212 milliseconds before timing out.\n")
    assert findings[0].id == "COLLECTIVE_TIMEOUT"
    assert "rank 6" in findings[0].title


def test_desync_report_with_different_collectives_is_a_mismatch():
    text = ("[rank0]:[E515 ProcessGroupNCCL.cpp:1937] Rank 0\n"
            "\t - [0] Timeout at collective: ALLREDUCE, #315\n"
            "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the "
            "desync are:\n"
            "\t     [7] finished collective #182, but didn't join collective #183 (count from 1)\n"
            "\t - Snapshot of ranks' latest states:\n"
            "\t   #315 started ranks:\n"
            "\t     [0, 1, 2] started ALLREDUCE\n"
            "\t   #317 started ranks:\n"
            "\t     [3, 4, 5, 6] started _ALLGATHER_BASE\n")
    findings = run(text)
    assert findings[0].id == "HANG_COLLECTIVE_MISMATCH"
    assert findings[0].ranks == [0, 1, 2]
    assert findings[0].evidence["collectives"] == {"0-2": "ALLREDUCE", "3-6": "_ALLGATHER_BASE"}


def test_never_joined_ranks():
    findings = run("\t - [0] Timeout at collective: ALLREDUCE, #1\n"
                   "\t - To our best knowledge, ranks [2, 3] are the lagging ranks that caused "
                   "this timeout. They never joined any collectives\n")
    assert [(f.id, f.ranks) for f in findings] == [("COLLECTIVE_TIMEOUT", [2, 3])]


def test_nccl_unhandled_system_error_alone_is_connectivity():
    findings = run("[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/"
                   "distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with "
                   "NCCL_DEBUG=INFO for details), NCCL version 2.19.3\n"
                   "[rank0]: ncclSystemError: System call (e.g. socket, malloc) or external "
                   "library call failed or device error.\n")
    assert [f.id for f in findings] == ["COMM_CONNECTIVITY"]


def test_repeated_errors_are_capped_but_counted():
    text = RESET.format(r=0) * 5000 + "[rank1]: AssertionError: shapes differ\n"
    events, _ = scan_stream(io.BytesIO(text.encode()), "big.log")
    assert len(events) <= 201
    findings = triage(events)
    assert findings[0].id == "RANK_CRASHED"
    assert findings[0].evidence["fallout"][0].startswith("5000 'Connection reset by peer'")


def test_dataloader_worker_exception_names_the_original_error():
    text = ("[rank0]: Traceback (most recent call last):\n"
            '[rank0]:   File "/home/u/train.py", line 50, in <module>\n'
            "[rank0]: KeyError: Caught KeyError in DataLoader worker process 1.\n"
            "[rank0]: Original Traceback (most recent call last):\n"
            '[rank0]:   File "/usr/lib/python3.11/site-packages/torch/utils/data/_utils/'
            'worker.py", line 349, in _worker_loop\n'
            '[rank0]:   File "/home/u/data.py", line 41, in __getitem__\n'
            "[rank0]: KeyError: 'image'\n")
    findings = run(text)
    # the workers ran: the Dataset's own code raised, and the rank died of it
    assert [(f.id, f.ranks) for f in findings] == [("RANK_CRASHED", [0])]
    assert findings[0].evidence["where"] == "/home/u/data.py:41 in __getitem__"
    assert findings[0].evidence["family"] == "dataset_code"
    assert "KeyError: 'image'" in findings[0].title


def test_address_in_use_from_a_c10d_warning():
    findings = run("[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 "
                   "(errno: 98 - Address already in use).\n"
                   "torch.distributed.DistNetworkError: The server socket has failed to listen on "
                   "any local network address. port: 29500, useIpv6: false, code: -98, name: "
                   "EADDRINUSE, message: address already in use\n")
    assert [(f.id, f.evidence.get("port")) for f in findings] == [("ENV_PORT_IN_USE", 29500)]


def test_clean_and_garbage_logs_have_no_findings():
    assert run("epoch 1 loss 0.5\nepoch 2 loss 0.4\n") == []
    assert run("Error Exception Traceback ====== ranks mismatch timeout\n" * 50) == []
    assert run("") == []
