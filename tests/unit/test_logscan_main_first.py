"""A rank that times out in the entry barrier of a "main process first" block (YOLO's
torch_distributed_zero_first, transformers' / accelerate's main_process_first) waited for
rank 0, which was still doing the block's work: HANG_RANK_MISSING_COLLECTIVE on rank 0,
next step a timeout (found among the development set's misses; issue #26 names the family:
"rank 0 busy preprocessing while the others time out in the first barrier"). Real log,
URL in its sidecar."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

from ddpdoctor.core.next_step import Action, decide

LOG = Path("tests/fixtures/reallogs/F2_rank0_image_check_zero_first_barrier_socket_timeout_"
           "yolov6.log")


def test_the_waiting_ranks_timeout_names_rank_0_busy():
    found = findings_of(LOG)
    lead = found[0]
    assert (lead.id, lead.ranks) == ("HANG_RANK_MISSING_COLLECTIVE", [0])
    assert "torch_distributed_zero_first" in lead.title
    assert decide(found).action is Action.RAISE_TIMEOUT


def test_rank_0_timing_out_itself_is_not_blamed_on_rank_0(tmp_path):
    # the same traceback as rank 0 printed it: rank 0 never waits on the way in
    text = "".join("[rank0]:" + x for x in LOG.read_text().splitlines(True))
    lead = findings_in(tmp_path, text)[0]
    assert lead.id == "RANK_CRASHED"


def test_the_barrier_on_the_way_out_is_not_the_entry_barrier(tmp_path):
    # the block's barrier reached from contextlib's __exit__ (the main process waiting for
    # the others): not the family
    text = LOG.read_text().replace("in __enter__", "in __exit__")
    assert findings_in(tmp_path, text)[0].id != "HANG_RANK_MISSING_COLLECTIVE"


def test_a_store_wait_that_times_out_during_rank_0s_tokenizing_names_rank_0(tmp_path):
    # the same pattern through the store: rank 1's socket wait on the store timed out while
    # an unnamed progress bar (the main process's tokenizing) ran
    lead = findings_of(Path("tests/fixtures/reallogs/L2_axolotl_rank1_store_timeout_during_"
                            "tokenization.log"))[0]
    assert (lead.id, lead.ranks) == ("HANG_RANK_MISSING_COLLECTIVE", [0])
    assert "Tokenizing Prompts" in lead.title


def test_a_store_wait_timeout_alone_names_no_rank(tmp_path):
    # https://github.com/axolotl-ai-cloud/axolotl/issues/2684, without the progress bar
    text = ("[rank1]:[W516 14:34:56.854597329 socket.cpp:489] [c10d] waitForInput: socket "
            "SocketImpl(fd=79, addr=[localhost]:41170, remote=[localhost]:29500) timed out "
            "after 1800000ms\n")
    lead = findings_in(tmp_path, text)[0]
    assert lead.ranks == [] and lead.id != "HANG_RANK_MISSING_COLLECTIVE"
