"""Blind run 40's lessons. `StopIteration` (and the other builtins whose names hold none of
the words the reader looks for: `StopAsyncIteration`, `GeneratorExit`) is an exception
line like any other: every rank of a LoRA job raising it on an empty dataset was called an
unexplained exit. Ranks that timed out in different collectives at their own sequence
numbers are a mismatch also where the watchdogs' work-state lines are there, when those
agree the ranks crossed: the rank stuck later completed the number the other is stuck in,
which one collective cannot do (a GRPO job with vLLM colocated: all-gathers of different
sizes one apart; called the rank "behind" missing). Real logs, URLs in their sidecars."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

REAL = Path("tests/fixtures/reallogs")
EMPTY = REAL / "X20_torchrun_empty_dataset_stopiteration_all_ranks.log"
CROSSED = REAL / "X20_vllm_colocate_allgather_seq_mismatch_timeout.log"


def test_stop_iteration_is_the_ranks_exception():
    lead = findings_of(EMPTY)[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [0, 4, 7])
    assert "StopIteration" in lead.title


def test_the_word_in_a_healthy_line_is_no_exception(tmp_path):
    text = "INFO: caught StopIteration at the end of the epoch, starting the next\n"
    assert not [f for f in findings_in(tmp_path, text) if f.severity == "error"]


def test_ranks_that_crossed_in_different_collectives_are_a_mismatch():
    lead = findings_of(CROSSED)[0]
    assert lead.id == "HANG_COLLECTIVE_MISMATCH"
    assert "#404" in lead.title and "#405" in lead.title


def test_work_states_that_do_not_cross_keep_the_rank_behind(tmp_path):
    # rank 1 says it completed only 403: nobody passed rank 0's 404, so rank 1's wait in
    # 405 is no proof of a different collective
    text = CROSSED.read_text().replace("last enqueued work: 406, last completed work: 404",
                                       "last enqueued work: 406, last completed work: 403")
    assert findings_in(tmp_path, text)[0].id != "HANG_COLLECTIVE_MISMATCH"
