"""Blind run 93's lessons (batch XF5: committed run logs, MLPerf results, issue threads;
URLs in their sidecars):

- A program's own error record in Python logging's default format ("ERROR:logger:...")
  is failure evidence the floor reads: a failed job is never "No failure found" over one
  (none of the development set's healthy runs logs one). Megatron's rerun state machine
  naming a NaN "on rank 13" is GRAD_NONFINITE on that rank.
- A set-up helper not found ("sudo: cpupower: command not found") in a run that then
  finished (MLPerf's run_stop with status success, now a completion line) did not stop
  the launch."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import errors_of, findings_in, findings_of

REAL = Path("tests/fixtures/reallogs")
NAN = REAL / "XF5_megatron_qwen3next_mtp_blackwell_nan_gradnorm.log"
MLPERF = REAL / "XF5_mlperf51_rocm_megatron_llama2_70b_lora_2node_mi300x_ok.log"


def test_megatrons_nan_check_names_the_rank():
    assert errors_of(findings_of(NAN)) == [("GRAD_NONFINITE", [13])]


def test_an_error_record_no_signature_knows_is_never_healthy(tmp_path):
    found = findings_in(tmp_path, "step 1 loss 2.31\nERROR:mytrainer.data:shard 7 is "
                                  "corrupt, stopping\n")
    assert errors_of(found) == [("UNRECOGNIZED_FAILURE", [])]
    assert "logged an error" in found[0].title


def test_a_helper_not_found_before_a_finished_run_is_no_failure():
    assert errors_of(findings_of(MLPERF)) == []


def test_a_helper_not_found_in_a_run_that_never_finished_is_still_said(tmp_path):
    text = "".join(ln for ln in MLPERF.read_text().splitlines(keepends=True)
                   if '"key": "run_stop"' not in ln)
    found = findings_in(tmp_path, text)
    assert any("cpupower" in f.title for f in found if f.severity == "error")
