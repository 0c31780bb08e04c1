"""Evidence families learned from the development set's misses before batch 10: the ranks'
watchdogs naming different collectives at one sequence number (a mismatch, whatever the
ops), and allocation failures outside the caching allocator's message (the CUDA runtime's
out-of-memory code, C++ and Rust allocators giving up on host memory). Lines from real
logs (thread URLs in the sidecars of tests/fixtures/reallogs/H1_seqnum_*, F3_collective_*,
L3_fail_gloo_cuda_oom_*, G2_deepspeed_launcher_host_alloc_*)."""

from __future__ import annotations

from logscan_helpers import first_in

_WD = ("[rank{r}]:[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective operation "
       "timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={n}, NumelOut={n}, "
       "Timeout(ms)=600000) ran for 600077 milliseconds before timing out.\n")


def test_watchdogs_at_one_seq_in_different_ops_name_the_odd_rank(tmp_path):
    text = (_WD.format(r=2, seq=4084, op="ALLREDUCE", n=4821568)
            + _WD.format(r=1, seq=4084, op="ALLREDUCE", n=4821568)
            + _WD.format(r=3, seq=4084, op="BROADCAST", n=56623104))
    f = first_in(tmp_path, text)
    assert (f.id, f.ranks) == ("HANG_COLLECTIVE_MISMATCH", [3])
    assert "sequence number 4084" in f.title and "BROADCAST" in f.title


def test_watchdogs_at_one_seq_with_different_sizes_are_a_mismatch(tmp_path):
    f = first_in(tmp_path, _WD.format(r=0, seq=3437, op="ALLREDUCE", n=4311252)
               + _WD.format(r=1, seq=3437, op="ALLREDUCE", n=1))
    # two ranks, two fingerprints: no minority to name
    assert (f.id, f.ranks) == ("HANG_COLLECTIVE_MISMATCH", [])


def test_watchdogs_agreeing_at_one_seq_are_no_mismatch(tmp_path):
    f = first_in(tmp_path, _WD.format(r=0, seq=7, op="ALLREDUCE", n=10)
               + _WD.format(r=1, seq=7, op="ALLREDUCE", n=10))
    assert f.id != "HANG_COLLECTIVE_MISMATCH"


def test_watchdogs_of_different_process_groups_are_not_compared(tmp_path):
    line = ("[rank{r}]:[E ProcessGroupNCCL.cpp:632] [PG {pg} Rank {r}] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=5, OpType={op}, NumelIn=8, "
            "NumelOut=8, Timeout(ms)=600000) ran for 600100 milliseconds before timing out.\n")
    f = first_in(tmp_path, line.format(r=0, pg=0, op="ALLREDUCE")
               + line.format(r=1, pg=3, op="ALLGATHER"))
    # one number of two groups is no one collective: no fingerprint claim, no rank named;
    # each rank waiting on a group of its own is said as that (run 91, NVIDIA/nccl#1610)
    assert (f.id, f.ranks) == ("HANG_COLLECTIVE_MISMATCH", [])
    assert "sequence number" not in f.title and "different process groups" in f.title


def test_cuda_runtime_out_of_memory_thrown_from_cpp_is_oom(tmp_path):
    f = first_in(tmp_path, "terminate called after throwing an instance of 'c10::Error'\n"
                         "  what():  CUDA error: out of memory\n"
                         "CUDA kernel errors might be asynchronously reported at some other API "
                         "call, so the stacktrace below might be incorrect.\n")
    assert (f.id, f.severity) == ("OOM", "error")


def test_native_allocators_giving_up_are_host_oom(tmp_path):
    f = first_in(tmp_path, "memory allocation of 2097152 bytes failed\n"
                         "[2023-04-16 21:54:13,235] [INFO] [launch.py:428:sigkill_handler] "
                         "Killing subprocess 62215\n")
    assert (f.id, f.severity) == ("OOM", "error")
    f = first_in(tmp_path, "terminate called after throwing an instance of 'std::bad_alloc'\n"
                         "  what():  std::bad_alloc\n")
    assert f.id == "OOM"


def test_a_rank_behind_whose_traceback_waits_in_another_collective_is_a_mismatch(tmp_path):
    # batch 10 (N1_collective_count_skew_*): ranks 0 and 4 enqueued up to work 77 and sat in
    # a gloo all_gather; the others timed out in BROADCAST #78
    src = ("tests/fixtures/reallogs/"
           "N1_collective_count_skew_gloo_vs_nccl_broadcast_hang_8gpu.log")
    lines = open(src).read().splitlines()
    keep = [ln for ln in lines if ln.startswith(("[rank0]: ", "[rank4]: "))
            or "Watchdog caught" in ln or "PG status" in ln]
    f = first_in(tmp_path, "\n".join(keep) + "\n")
    assert (f.id, f.ranks) == ("HANG_COLLECTIVE_MISMATCH", [0, 4])
    assert "rank 0 was in all_gather" in f.title and "BROADCAST #78" in f.title


def test_a_rank_behind_in_the_same_collective_stays_a_missing_rank(tmp_path):
    text = ("[rank0]: Traceback (most recent call last):\n"
            '[rank0]:   File "/w/train.py", line 9, in <module>\n'
            '[rank0]:   File "/usr/lib/python3/site-packages/torch/distributed/'
            'distributed_c10d.py", line 3949, in broadcast\n'
            "[rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] "
            "Connection closed by peer [192.168.7.7]:57000\n")
    for r in (1, 2):
        text += (f"[rank{r}]:[E810 03:04:11.061727749 ProcessGroupNCCL.cpp:683] [Rank {r}] "
                 "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=78, "
                 "OpType=BROADCAST, NumelIn=80, NumelOut=80, Timeout(ms)=600000) ran for "
                 "600096 milliseconds before timing out.\n"
                 f"[rank{r}]:[E810 03:04:11.063313477 ProcessGroupNCCL.cpp:2241] [PG ID 0 PG "
                 f"GUID 0(default_pg) Rank {r}]  failure detected by watchdog at work sequence "
                 "id: 78 PG status: last enqueued work: 79, last completed work: 77\n")
    text += ("[rank0]:[E810 03:04:11.063313477 ProcessGroupNCCL.cpp:1858] [PG ID 0 PG GUID "
             "0(default_pg) Rank 0] Received a dump signal due to a collective timeout from  "
             "rank 1 and we will try our best to dump the debug info. Last enqueued NCCL "
             "work: 77, last completed NCCL work: 77.\n")
    f = first_in(tmp_path, text)
    assert (f.id, f.ranks) == ("HANG_RANK_MISSING_COLLECTIVE", [0])


def test_a_launchers_report_of_the_rank_that_crashed_names_its_unprefixed_traceback(tmp_path):
    # batch 11 (O1_composer_*): Composer's launcher names the rank; the traceback has no
    # rank prefix of its own
    f = first_in(tmp_path, "Building trainer...\nTraceback (most recent call last):\n"
                         "RuntimeError: Cannot writeback when the parameter shape changes\n"
                         "Expects torch.Size([1769472]) but got torch.Size([2304, 768])\n"
                         "ERROR:composer.cli.launcher:Rank 0 crashed with exit code 1.\n")
    assert (f.id, f.ranks) == ("RANK_CRASHED", [0])
    assert "Cannot writeback" in f.title


def test_a_launchers_report_alone_is_that_ranks_crash(tmp_path):
    f = first_in(tmp_path, "ERROR:composer.cli.launcher:Rank 0 crashed with exit code 1.\n")
    assert (f.id, f.ranks, f.severity) == ("RANK_CRASHED", [0], "error")
