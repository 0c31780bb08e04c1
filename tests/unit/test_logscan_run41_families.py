"""Blind run 41's lesson (a batch scored on the session's final rules): a rank that left
the training loop alone (rank 0's early stop) while the other three timed out in the next
all-reduce was called a crash of rank 3, for two reasons of one kind: the Python error an
abort raises on the ranks that felt it (`DistBackendError: NCCL communicator was aborted on
rank N`) is the abort's fallout, not a crash; and the watchdog's C++ frame
(`WorkNCCL::checkTimeout`) names no collective, so it does not decide which collective hung
first. With both, the three reports name the rank that was not there. Real log, URL in
its sidecar."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in

LOG = Path("tests/fixtures/reallogs/X23_torchrun_rank0_early_stop_break_allreduce_timeout.log")


def test_the_rank_that_left_the_loop_is_the_one_missing(tmp_path):
    # the file's name says rank0: the lines are read without it (findings_in)
    lead = findings_in(tmp_path, LOG.read_text())[0]
    assert (lead.id, lead.ranks) == ("HANG_RANK_MISSING_COLLECTIVE", [0])
    assert "ALLREDUCE #19251" in lead.title


def test_the_aborted_communicator_error_alone_is_no_crash_of_its_rank(tmp_path):
    line = next(x for x in LOG.read_text().splitlines(True) if "communicator was aborted" in x)
    found = findings_in(tmp_path, line)
    assert not [f for f in found if f.id == "RANK_CRASHED" and f.ranks == [3]]


def test_frames_alone_still_say_a_timeout(tmp_path):
    frames = [x for x in LOG.read_text().splitlines(True) if "checkTimeout(" in x][:2]
    assert findings_in(tmp_path, "".join(frames))[0].id == "COLLECTIVE_TIMEOUT"
