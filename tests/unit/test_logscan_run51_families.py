"""Blind run 51's lessons (batches X47, X48, X49):

- A log record at level W(arning) or I(nfo) (torch._logging's "W0619 13:43:42.034000 237636
  torch/_inductor/codecache.py:1045] ", c10's "[W619 13:43:12.37 ProcessGroupNCCL.cpp:936]")
  that holds a traceback was logged by a program that went on: no crash.
- A batch script's own line failing ("slurm_script: line 372: python: command not found")
  after which ranks printed: the script went on and launched the job.
- A traceback from a side tool's own program (the `wandb` command a batch script ran, all
  its frames in wandb) is that tool failing, not a rank.
- Run 50's start-up census named a fresh case right, blind: ranks 0-3 of 8, each twice.

Real logs, URLs in their sidecars; the variants are cut from them."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of, lines_of

DIR = Path("tests/fixtures/reallogs")
HEALTHY = DIR / ("X49_healthy_megatron_56rank_inductor_cache_tracebacks_clean_data_exhaustion_"
                 "exit.log")
CRASH = DIR / "X49_megatron_56rank_data_exhausted_stopiteration_tp_broadcast_timeout.log"
TWICE = DIR / "X47_lightning_srun_no_ntasks_duplicate_global_ranks_2x4_hang.log"
TENSORBOARD = DIR / "J1_tensorboard_callback_all_ranks_mkdir_fileexists_fastai.log"


def test_a_finished_run_with_logged_tracebacks_and_a_failed_script_line_is_healthy():
    found = findings_of(HEALTHY)
    assert not [f for f in found if f.severity == "error"], [(f.id, f.title) for f in found]


def test_a_traceback_in_a_warning_record_is_no_crash_but_in_an_error_record_it_is(tmp_path):
    record = lines_of(HEALTHY, 196, 201)  # rank 3's inductor cache warning with its traceback
    assert "W0619" in record and "FileNotFoundError" in record
    assert findings_in(tmp_path, record) == []
    lead = findings_in(tmp_path, record.replace("W0619", "E0619"))[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [3])


def test_c10s_warning_record_with_an_exception_text_is_no_crash(tmp_path):
    line = ("[W619 13:43:12.371397423 ProcessGroupNCCL.cpp:936] Warning: caught "
            "ValueError: something odd (function operator())\n")
    assert [f for f in findings_in(tmp_path, "0: " + line) if f.severity == "error"] == []


def test_a_script_line_not_found_is_the_failure_only_when_nothing_ran_after_it(tmp_path):
    head = lines_of(HEALTHY, 1, 2)
    assert "slurm_script: line 372: python: command not found" in head
    lead = findings_in(tmp_path, head)[0]
    assert (lead.id, lead.evidence.get("family")) == ("UNRECOGNIZED_FAILURE", "family_start")
    ran = head + lines_of(HEALTHY, 195, 225)  # ranks' own records follow: the script went on
    assert [f for f in findings_in(tmp_path, ran) if f.severity == "error"] == []


def test_the_wandb_program_failing_in_a_batch_script_is_not_the_jobs_crash():
    lead = findings_of(CRASH)[0]
    assert "dataclasses" not in lead.title
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [2, 46, 48])  # the tracebacks kept
    assert "StopIteration" in lead.title


def test_a_side_tools_frames_under_a_training_script_are_still_a_crash(tmp_path):
    # a cut traceback (no program frame) inside tensorboard: the rank that created it died
    assert findings_of(TENSORBOARD)[0].id == "RANK_CRASHED"
    tool = lines_of(CRASH, 1, 14)
    user = tool.replace('"/users/elyulina/.local/bin/wandb", line 5, in <module>',
                        '"/home/u/train.py", line 5, in <module>')
    assert findings_in(tmp_path, user)[0].id == "RANK_CRASHED"
    assert [f for f in findings_in(tmp_path, tool) if f.severity == "error"] == []


def test_the_census_names_overlapping_launches_it_had_not_seen():
    lead = findings_of(TWICE)[0]
    assert (lead.id, lead.ranks) == ("HANG_RANK_MISSING_COLLECTIVE", [])
    assert lead.evidence["announced_twice"] == [0, 1, 2, 3]
    assert lead.evidence["missing"] == [4, 5, 6, 7]
