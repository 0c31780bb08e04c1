"""Blind run 62's lessons (batches X75 and X76), each a family:

- NCCL's "Connection closed by remote peer HOST" is an orderly close: the peer's process
  ended (killed or crashed), not the network, so with ncclRemoteError it names a process on
  that host that ended. The watchdog's "Exception (either an error or timeout) detected"
  line is a timeout only when no error is named beside it.
- After the trainer said training completed, a batch script's next step that did not start
  (a command not found, the scheduler refusing the step it asked for) is the script's, said
  as a warning; the scheduler refusing a step is failure evidence of its own (nothing of the
  step ran), whatever comes before it.

Real logs, URLs in their sidecars; the variants are cut from them."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of, lines_of

from ddpdoctor.core.next_step import Action, decide

DIR = Path("tests/fixtures/reallogs")
NODE_LOST = DIR / "X75_node_ranks_killed_survivor_allreduce_remote_error_24gpu_gke.log"
FINISHED = DIR / (
    "X75_healthy_8gpu_rccl_zero3_sft_completed_nccl_info_chatter_eval_srun_qos_error.log")


def test_a_peer_that_closed_its_connections_is_a_process_that_ended():
    lead = findings_of(NODE_LOST)[0]
    assert (lead.id, lead.ranks, lead.severity) == ("RANK_CRASHED", [], "error")
    assert "zcn4" in str(lead.evidence["peer_host"])
    assert "ended" in lead.title


def test_a_remote_error_with_no_close_stays_a_connection_loss(tmp_path):
    # the async exception, its ncclRemoteError line and the watchdog's state line
    lead = findings_in(tmp_path, lines_of(NODE_LOST, 72, 73) + lines_of(NODE_LOST, 87, 87))[0]
    assert lead.id == "COMM_CONNECTIVITY"


def test_the_watchdogs_state_line_alone_is_still_a_timeout(tmp_path):
    lead = findings_in(tmp_path, lines_of(NODE_LOST, 87, 87))[0]
    assert lead.id == "COLLECTIVE_TIMEOUT"


def test_a_script_step_after_training_completed_is_a_warning():
    found = findings_of(FINISHED)
    assert not [f for f in found if f.severity == "error"], [f.title for f in found]
    lead = found[0]
    assert (lead.id, lead.severity) == ("UNRECOGNIZED_FAILURE", "warning")
    assert "command not found" in lead.title and lead.evidence["after_completion"]


def test_a_refused_step_alone_is_a_failure_to_fix_in_the_request(tmp_path):
    found = findings_in(tmp_path, lines_of(FINISHED, 481, 486))
    lead = found[0]
    assert (lead.id, lead.severity) == ("UNRECOGNIZED_FAILURE", "error")
    assert lead.evidence["family"] == "allocation_refused"
    assert decide(found).action is Action.FIX_CONFIG


def test_a_command_not_found_before_any_training_is_still_the_jobs(tmp_path):
    lead = findings_in(tmp_path, lines_of(FINISHED, 479, 480))[0]
    assert (lead.id, lead.severity) == ("UNRECOGNIZED_FAILURE", "error")


# From the development set's misses, the same session: NCCL's duplicate-GPU message is read
# by its shape (quoted with its prefix reworded), and every pair it reports names its ranks.
def test_every_pair_sharing_a_gpu_is_named():
    blog = findings_of(DIR / "G2_duplicate_gpu_rank_mapping_device_order_blog.log")[0]
    assert (blog.id, blog.ranks) == ("GPU_DEVICE_MAPPING", [19, 21, 27, 29])
    assert "1 more device" in blog.title
    horovod = findings_of(DIR / "F5_horovod_mpirun_duplicate_gpu.log")[0]
    assert (horovod.id, horovod.ranks) == ("GPU_DEVICE_MAPPING", [0, 1, 2, 4, 5])
