"""The evidence families learned from locked runs 5 and 6, each held on the real log that
taught it (tests/fixtures/reallogs/, thread URLs in the sidecars): the exact finding and
rank, or that a healthy run stays healthy."""

from __future__ import annotations

from pathlib import Path

import pytest
from logscan_helpers import findings_of

from ddpdoctor.diagnose import LogInput, diagnose_logs

LOGS = Path(__file__).parents[1] / "fixtures" / "reallogs"


def _first(name: str):
    f = findings_of(LOGS / f"{name}.log")[0]
    return f.id, f.severity, f.ranks


@pytest.mark.parametrize("name, expected", [
    # Horovod's stall inspector: rank 2 is in no ready list
    ("G1_horovod_broadcast_stalled_rank2_never_ready",
     ("HANG_RANK_MISSING_COLLECTIVE", "error", [2])),
    # Ray's raylet killed workers for memory pressure
    ("G2_ray_raylet_workers_killed_memory_pressure_wmpo", ("OOM", "error", [])),
    # an exception of the memory family, raised by Ray (not a crash of the code)
    ("G2_ray_task_killed_host_oom_openrlhf_70b_offload", ("OOM", "error", [])),
    # NCCL's own CUDA allocation failed while another rank's connection closed (the
    # "[3]" of NCCL's prefix is a device, not a rank)
    ("G1_nccl_init_cuda_oom_zero3_rm_multinode", ("OOM", "error", [])),
    # nodes with different NCCL network plugins
    ("G2_nccl_net_plugin_on_some_nodes_only_hang", ("ENV_VERSION_MISMATCH", "error", [])),
    # an NCCL WARN that says Error: a library's error, quoted, never healthy
    ("G2_nccl_ring_not_loop_back_uninit_link_speed_2193",
     ("UNRECOGNIZED_FAILURE", "error", [])),
    # NCCL < 2.26 on an RTX 5090
    ("G1_nccl_2_25_rtx5090_maxsharedmem_needs_2_26", ("KNOWN_UPSTREAM_BUG", "error", [])),
    # run 6: a pod evicted because its node ran low on memory
    ("H2_k8s_tfjob_master_pods_evicted_node_low_memory", ("OOM", "error", [])),
    # run 6: Open MPI's TCP transport refused a peer (a wrong interface)
    ("H2_mpirun_btl_tcp_wrong_interface_unexpected_process_identifier",
     ("UNRECOGNIZED_FAILURE", "error", [])),
    # run 6: torch's "NCCL error in:" wrapper, nothing else in the log
    ("H2_docker_bridge_isolation_two_containers_nccl_unhandled_system_error",
     ("UNRECOGNIZED_FAILURE", "error", [])),
    # run 6: a watchdog line whose words were cut ("millis econds")
    ("H1_preprocessing_broadcast_timeout_xtuner_llava",
     ("COLLECTIVE_TIMEOUT", "error", [])),
])
def test_family(name, expected):
    assert _first(name) == expected


def test_a_bf16_runs_constant_loss_scale_is_not_a_collapse():
    # Megatron prints "loss scale: 1.0" on every iteration of a bf16 run (run 6's one
    # healthy run called failed, before the fix).
    findings, _ = diagnose_logs([LogInput(str(LOGS / "H1_healthy_megatron_bridge_nsys_profile_run"
                                                     ".log"), rank_from_path=False)])
    assert [f.id for f in findings if f.severity == "error"] == []
