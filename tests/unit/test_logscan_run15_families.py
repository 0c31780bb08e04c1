"""Evidence families learned from locked run 15 (batch S1_, scored blind first: 3/6) and
the development set's misses of the same kind. Lines from real logs (their sources in the
sidecars under tests/fixtures/reallogs/)."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

from ddpdoctor.diagnose.rules_training import memory_holders

REAL = Path("tests/fixtures/reallogs")
GIB, MIB = 2**30, 2**20


def test_a_signature_wrapped_onto_the_next_line_is_still_read():
    """NCCL's IB completion error pasted with 'len' / '0, vendor err 129' on two lines."""
    log = REAL / "S1_ib_completion_error_nodes_not_colocated_azure.log"
    assert "len\n0, vendor err 129" in log.read_text()
    lead = findings_of(log)[0]
    assert lead.id == "COMM_CONNECTIVITY" and "error 12 (IBV_WC_RETRY_EXC_ERR)" in lead.title


def test_a_wrapped_line_is_joined_only_for_a_needle_on_the_first_line(tmp_path):
    # the second line alone holds a signature: it is read once, on its own line
    text = ("some unrelated line\nDataLoader worker (pid 624) is killed by signal: "
            "Segmentation fault.\n")
    found = [f for f in findings_in(tmp_path, text) if f.id == "DATALOADER_WORKER_FAILURE"]
    assert len(found) == 1 and found[0].evidence["first_seen"].endswith(":2")


def test_who_held_the_gpu_that_ran_out():
    # other workloads: three processes of different sizes hold more than this one
    assert memory_holders({"others_bytes": [int(19.88 * GIB), int(4.72 * GIB),
                                            int(3.52 * GIB)],
                           "in_use_bytes": int(16.23 * GIB)})[0] == "others"
    # stray CUDA contexts: many equal small amounts (this process not in the list)
    assert memory_holders({"others_bytes": [int(1.19 * GIB)] * 15,
                           "allocated_by_pytorch": "11.54 GiB"})[0] == "stray"
    # this process holds most: the model does not fit, the contexts are a detail
    assert memory_holders({"others_bytes": [474 * MIB] * 3,
                           "in_use_bytes": int(60.3 * GIB)})[0] == "mine"
    # torch < 2.2 lists this process too: the entry that holds what PyTorch allocated
    assert memory_holders({"others_bytes": [int(39.55 * GIB)],
                           "allocated_by_pytorch": "37.77 GiB"})[0] == "mine"
    assert memory_holders({"others_bytes": [int(30.51 * GIB), 1022 * MIB],
                           "allocated_by_pytorch": "594.01 MiB"})[0] == "others"


def test_other_jobs_on_the_gpu_are_gpu_memory_occupied_on_the_rank_that_ran_out():
    lead = findings_of(REAL / "S1_oom_gpu0_shared_other_processes_olora.log")[0]
    assert (lead.id, lead.ranks, lead.severity) == ("GPU_MEMORY_OCCUPIED", [0], "error")
    assert "28.12 GiB of GPU 0" in lead.title
    stray = findings_of(REAL / "a_oom_gpu0_every_rank_context_returnn.log")[0]
    assert stray.id == "GPU_DEVICE_MAPPING" and "15 other processes hold 1.19 GiB" in stray.title
    mine = findings_of(REAL / "L2_msswift_zero3_multinode_oom_rank11.log")[0]
    assert (mine.id, mine.ranks) == ("OOM", [11])


def test_the_watchdogs_own_abort_is_no_native_crash():
    """Both ranks' first BROADCAST timed out; NCCL then takes each process down with
    SIGABRT and DeepSpeed's launcher reports exit -6: the timeout leads, with the hint
    that no collective ever completed."""
    lead = findings_of(REAL / "S1_broadcast_timeout_p2p_disable_fix_olora.log")[0]
    assert lead.id == "COLLECTIVE_TIMEOUT" and "BROADCAST #1" in lead.title
    assert "first collective never completed" in lead.evidence["hint"]
    assert "NCCL_P2P_DISABLE=1" in lead.evidence["hint"]


def test_a_sigabrt_with_no_watchdog_timeout_stays_a_native_crash(tmp_path):
    line = next(x for x in (REAL / "S1_broadcast_timeout_p2p_disable_fix_olora.log")
                .read_text().splitlines(True) if "exits with return code" in x)
    lead = findings_in(tmp_path, line)[0]
    assert lead.id == "RANK_CRASHED" and "SIGABRT" in lead.title


def test_libraries_that_say_the_gpus_have_no_peer_to_peer():
    lead = findings_of(REAL / "G1_accelerate_rtx3090_no_p2p_ib_check_nccl_p2p_disable_required"
                              ".log")[0]
    assert (lead.id, lead.severity) == ("TOPO_NO_P2P", "error")
    assert "NCCL_P2P_DISABLE=1" in lead.evidence["fix"]
    rccl = findings_of(REAL / "M1_rocm_vllm_tp_hang_p2p_enabled_iommu_warn.log")[0]
    assert (rccl.id, rccl.severity) == ("TOPO_NO_P2P", "warning")
    assert "iommu=pt" in rccl.title
