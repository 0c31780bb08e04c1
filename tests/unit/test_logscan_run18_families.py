"""Evidence families learned from locked run 18 (batch V1_, scored blind first: 4/8, one
failed job called healthy): Lightning's launcher reporting a child's death (with its
"[rank: N]" prefix), NVML's driver/library version mismatch, NCCL finding no network
plugin to load. Real logs (their URLs in the sidecars under tests/fixtures/reallogs/)."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_of

from ddpdoctor.diagnose.reader import split_rank_prefix

REAL = Path("tests/fixtures/reallogs")


def test_lightnings_launcher_reporting_a_killed_child_is_no_healthy_run():
    lead = findings_of(REAL / "V1_rank1_sigkill_minus9_lightning_ddp_batch512.log")[0]
    # a bare SIGKILL: the corpus's convention, the host's OOM killer most likely
    assert (lead.id, lead.ranks, lead.severity) == ("OOM", [1], "error")
    assert split_rank_prefix("[rank: 1] Child process with PID 4056289 terminated")[0] == 1


def test_a_driver_library_mismatch_is_the_node_not_the_network():
    lead = findings_of(REAL / "V1_nccl_system_error_nvml_driver_library_mismatch.log")[0]
    assert lead.id == "ENV_VERSION_MISMATCH" and "reboot" in lead.evidence["fix"]


def test_no_network_plugin_is_the_nccl_net_setting():
    lead = findings_of(REAL / "V1_nccl_net_shm_invalid_plugin_init_fails_torchrun.log")[0]
    assert lead.id == "ENV_NCCL_CONFIG" and "NCCL_NET" in lead.title
