"""Evidence families learned from locked run 22 (batch X3_, scored blind first: 5/6, one
healthy run called failed): a trainer's own word that training is over ("Training
completed", Lightning's "`Trainer.fit` stopped: ... reached", Megatron's "[after training is
done]") followed only by a crash while the process exits (an abort in garbage collection,
the launcher's SIGABRT report) is a warning, not a failed job: what it saved is whole. A
crash with no such line before it, or a Python or CUDA error after it, stays an error.
Real logs (URLs in the sidecars)."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

REAL = Path("tests/fixtures/reallogs")
DONE = REAL / "X3_healthy_sigabrt_after_training_completed_torchtitan.log"


def test_an_abort_at_exit_after_training_completed_is_a_warning():
    found = findings_of(DONE)
    assert [(f.id, f.severity) for f in found] == [("RANK_CRASHED", "warning")]
    assert found[0].evidence["after_completion"].endswith(":5")
    assert "destroy_process_group" in found[0].evidence["hint"]


def test_the_same_abort_without_the_completion_line_is_an_error(tmp_path):
    lines = [x for x in DONE.read_text().splitlines(True) if "Training completed" not in x]
    assert findings_in(tmp_path, "".join(lines))[0].severity == "error"


def test_a_cuda_error_after_completion_stays_an_error(tmp_path):
    lines = DONE.read_text().splitlines(True)
    # https://github.com/vllm-project/vllm/issues/4108
    fault = ("[rank0]:RuntimeError: CUDA error: an illegal memory access was encountered\n")
    text = "".join(lines[:6] + [fault] + lines[6:])
    lead = findings_in(tmp_path, text)[0]
    assert (lead.id, lead.severity) == ("RANK_CRASHED", "error")


def test_a_failure_before_the_completion_line_keeps_the_usual_rules(tmp_path):
    lines = DONE.read_text().splitlines(True)
    abort = [x for x in lines if "Fatal Python error" in x]
    text = "".join(abort + lines)
    assert findings_in(tmp_path, text)[0].severity == "error"


def test_an_exception_whose_message_failed_to_print_is_named_by_its_type():
    # Python writes "<exception str() failed>" when the exception's own __str__ raised
    lead = findings_of(REAL / "X3_rank3_libsndfile_error_torchrun_teardown_salmonn.log")[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [3])
    assert "LibsndfileError: (its message could not be printed)" in lead.title


def test_a_sigkill_after_completion_stays_an_error(tmp_path):
    # the same log with the crash at exit made the OOM killer's (exit -9, no abort line)
    text = "".join(x.replace("exitcode: -6", "exitcode: -9").replace("exitcode  : -6",
                   "exitcode  : -9").replace("Signal 6 (SIGABRT)", "Signal 9 (SIGKILL)")
                   for x in DONE.read_text().splitlines(True)
                   if "Fatal Python" not in x and "terminate called" not in x)
    lead = findings_in(tmp_path, text)[0]
    assert (lead.id, lead.severity, lead.ranks) == ("OOM", "error", [1])
