"""Blind run 53's lesson (batch X53): every rank the launcher reports exited with one and
the same chosen code (65 here: 2 to 127, neither Python's 1 for an uncaught exception nor a
signal's 128+N) and none printed an error. The program stopped itself after a check of its
own (this one: its throughput gate); no rank crashed first, whichever torchrun calls the
root cause. Said as UNRECOGNIZED_FAILURE naming no rank, with the code to search for.

Real logs, URLs in their sidecars; the variants are cut from them."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

DIR = Path("tests/fixtures/reallogs")
OWN = DIR / "X53_mfu_gate_stop_exit65_all_ranks.log"


def test_every_rank_exiting_with_one_chosen_code_is_the_program_stopping_itself():
    lead = findings_of(OWN)[0]
    assert (lead.id, lead.ranks, lead.severity) == ("UNRECOGNIZED_FAILURE", [], "error")
    assert lead.evidence["family"] == "own_exit" and lead.evidence["exit_code"] == 65
    assert "sys.exit(65)" in lead.title


def test_one_rank_with_another_code_is_that_ranks_death(tmp_path):
    text = OWN.read_text().replace("exitcode  : 65 (pid: 3859750)",
                                   "exitcode  : 3 (pid: 3859750)")
    lead = findings_in(tmp_path, text)[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [1])


def test_pythons_own_exit_code_on_every_rank_is_not_a_chosen_one(tmp_path):
    text = OWN.read_text().replace("exitcode  : 65", "exitcode  : 1")
    assert findings_in(tmp_path, text)[0].evidence.get("family") != "own_exit"


def test_a_rank_that_printed_its_error_is_a_crash_not_a_chosen_stop(tmp_path):
    text = "[rank2]: ValueError: bad shard\n" + OWN.read_text()
    found = findings_in(tmp_path, text)
    assert all(f.evidence.get("family") != "own_exit" for f in found)
    assert ("RANK_CRASHED", [2]) in [(f.id, f.ranks) for f in found]


BUSY = DIR / "F2_rank0_dataset_gen_barrier_timeout_alignment_handbook.log"


def test_rank_0s_unnamed_progress_line_makes_it_busy_not_stuck():
    """Read without its file name's rank: rank 1 times out while a dataset progress line
    that names no rank runs (the "main process first" pattern makes it rank 0's): rank 0
    was busy, and the next step is to raise the timeout (or prepare the data first), not
    to fix the code."""
    from ddpdoctor.core.next_step import Action, decide

    found = findings_of(BUSY)
    lead = found[0]
    assert (lead.id, lead.ranks) == ("HANG_RANK_MISSING_COLLECTIVE", [0])
    assert "busy elsewhere (Generating train split)" in lead.title
    assert decide(found).action is Action.RAISE_TIMEOUT



def test_the_silent_rank_0_whose_unnamed_scan_line_runs_is_busy_too():
    from ddpdoctor.core.next_step import Action, decide

    found = findings_of(DIR / "F2_rank0_label_cache_scan_60s_pg_timeout_yolov5.log")
    assert (found[0].id, found[0].ranks) == ("HANG_RANK_MISSING_COLLECTIVE", [0])
    assert "busy elsewhere (Scanning)" in found[0].title
    assert decide(found).action is Action.RAISE_TIMEOUT
