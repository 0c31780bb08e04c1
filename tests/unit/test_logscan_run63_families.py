"""Blind run 63's lessons (batches X78 and X80), each a family:

- XLA's status for a device allocation that failed (`RESOURCE_EXHAUSTED: Attempting to
  reserve ... That was not possible`, `Ran out of memory in memory space vmem`) is the
  accelerator's out-of-memory under torch_xla; the log was read as healthy.
- Ray's "A worker died or was killed ... by an unexpected system error" is a worker that
  vanished with no error of its own: read as a SIGKILL (Ray names the OOM killer first),
  so `OOM`, likely, as a bare SIGKILL is.

Real logs, URLs in their sidecars."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_of

from ddpdoctor.core.next_step import Action, decide

DIR = Path("tests/fixtures/reallogs")


def test_xla_resource_exhausted_is_the_accelerators_oom():
    found = findings_of(DIR / "X80_tpu_xla_hbm_resource_exhausted_after_epochs.log")
    lead = found[0]
    assert (lead.id, lead.severity, lead.evidence["kind"]) == ("OOM", "error", "XLA")
    assert "Attempting to reserve 6.48G" in lead.title
    assert decide(found).action is Action.FIX_CONFIG


def test_a_ray_worker_that_vanished_is_a_likely_oom_kill():
    for name in ("X80_ray_train_worker_killed_after_train_func_oom",
                 "F5_verl_ray_worker_died_system_error"):
        lead = findings_of(DIR / f"{name}.log")[0]
        assert (lead.id, lead.evidence["signal"], lead.evidence["certainty"]) == (
            "OOM", "SIGKILL", "likely"), name


def test_an_accelerator_an_earlier_process_still_holds_is_occupied():
    found = findings_of(DIR / "X80_npu_hccp_init_stale_training_process.log")
    lead = found[0]
    assert (lead.id, lead.severity) == ("GPU_MEMORY_OCCUPIED", "error")
    assert [f.id for f in found if f.severity == "error"] == ["GPU_MEMORY_OCCUPIED"]
    assert decide(found).action is Action.RESTART
