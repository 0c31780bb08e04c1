"""Evidence family learned from locked run 17 (batch U1_, scored blind first: 1/2, one
healthy run called failed): a job someone stopped with Ctrl-C. Every rank raises
KeyboardInterrupt where it was working and the launcher tears down the rest: stopped, not
broken, said as a warning. Interrupted inside a wait (a collective, a launcher waiting on
its children) may be a hang someone stopped: not this family."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

LOG = Path("tests/fixtures/reallogs/U1_healthy_user_ctrl_c_megatron_ds_8gpu_keyboardinterrupt"
           ".log")

# https://github.com/hpcaitech/ColossalAI/issues/5179 (a job "stucked"; the user's Ctrl-C)
_STUCK = Path("tests/fixtures/logs/colossalai_5179_ctrl_c_in_launcher_wait.log").read_text()


def test_a_job_stopped_with_ctrl_c_in_its_work_is_said_not_failed():
    """Stopped, not broken: information (since run 95, after any advice the framework
    gave before the stop: tests/unit/test_logscan_run95_families.py)."""
    found = findings_of(LOG)
    assert [(f.id, f.severity) for f in found] == [("UNRECOGNIZED_FAILURE", "info")]
    assert "interrupted (KeyboardInterrupt at basic_layer.py:80" in found[0].title
    # the launcher's teardown and its own error in its interrupt handler are that stop
    assert "NameError" in LOG.read_text()


def test_an_interrupt_inside_a_wait_is_not_called_a_stop(tmp_path):
    assert not any("interrupted" in f.title for f in findings_in(tmp_path, _STUCK))


def test_an_error_before_the_interrupt_still_leads(tmp_path):
    oom = next(x for x in Path("tests/fixtures/reallogs/S1_oom_gpu0_shared_other_processes_"
                               "olora.log").read_text().splitlines(True)
               if x.startswith("[rank0]: torch.OutOfMemoryError"))
    lead = findings_in(tmp_path, oom + LOG.read_text())[0]
    assert lead.id == "GPU_MEMORY_OCCUPIED" and lead.severity == "error"


def test_only_a_stop_makes_the_launchers_teardown_its_own(tmp_path):
    """A routine fp16 skip (a warning) beside the launcher killing its workers: the
    teardown still says a worker died (an error), only an interrupt explains it."""
    teardown = "".join(x for x in LOG.read_text().splitlines(True) if "Killing subprocess" in x)
    skip = ("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to "
            "32768.0\n{'loss': 2.3153, 'grad_norm': inf, 'learning_rate': 8e-07, "
            "'epoch': 0.1}\n{'loss': 2.2711, 'grad_norm': 1.93, 'learning_rate': 8e-07, "
            "'epoch': 0.2}\n")
    found = findings_in(tmp_path, skip + teardown)
    assert any(f.severity == "error" for f in found), found
