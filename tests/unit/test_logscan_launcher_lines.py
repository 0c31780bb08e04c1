"""The launcher's own lines are not a worker's, and a pasted log's markdown is not the job's
(real logs, URLs in their sidecars).

- torchrun's teardown of the other workers ("Sending process P closing signal SIGTERM")
  and its own ChildFailedError traceback carry no rank; given to the rank that failed,
  they made that rank look like it died of what it felt, and its death went unexplained.
- A bare exit code with nothing else (no other worker, no line of the worker's own) is a
  failure no line explains; with the others torn down, a rank that crashed.
- A log pasted as inline code starts its first line with a backtick: its error was unread;
  a name the program quoted itself ("`Trainer.fit` stopped") keeps its backtick.
"""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_of

from ddpdoctor.diagnose import LogInput, scan_inputs
from ddpdoctor.diagnose.events import EventKind
from ddpdoctor.diagnose.reader import strip_envelope

REAL = Path("tests/fixtures/reallogs")


def test_a_rank_whose_exit_tore_the_others_down_crashed():
    lead = findings_of(REAL / "Q1_torchrun_local_rank_exit1_sigterm_teardown.log")[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [5])
    assert "exited with code 1" in lead.title


def test_a_lone_exit_code_is_a_failure_no_line_explains():
    lead = findings_of(REAL / "F4_chinese_vicuna_torchrun_bare_exitcode1.log")[0]
    assert (lead.id, lead.severity) == ("UNRECOGNIZED_FAILURE", "error")
    assert "exit code 1" in lead.title


def test_an_error_pasted_as_inline_code_is_read():
    lead = findings_of(REAL / "L3_fail_ddp_load_missing_keys_unimatch.log")[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [0])
    assert "Error(s) in loading state_dict" in lead.title


def test_the_inline_code_backtick_is_taken_off_and_a_fence_kept():
    assert strip_envelope("`RuntimeError: x`") == "RuntimeError: x`"
    assert strip_envelope("> `ValueError: y") == "ValueError: y"
    assert strip_envelope("```python") == "```python"
    assert strip_envelope("``") == "``"


def test_a_name_the_program_quoted_keeps_its_backtick():
    # Lightning's closing line (V1_healthy_lightning_ddp_2xl40s_30_epochs_completed.log):
    # with its first backtick taken off, the run's completion went unread
    line = "`Trainer.fit` stopped: `max_epochs=30` reached."
    assert strip_envelope(line) == line
    assert strip_envelope("> " + line) == line
    log = REAL / "V1_healthy_lightning_ddp_2xl40s_30_epochs_completed.log"
    done = [e for e in scan_inputs([LogInput(str(log), rank_from_path=False)]).events
            if e.kind is EventKind.JOB_DONE]
    assert [e.data["what"] for e in done] == ["`Trainer.fit` stopped: `max_epochs=30` reached"]
