"""The evidence family learned from locked run 7 (batch J1_, scored blind first): a
gradient norm that is non-finite in a trainer's metrics line. Held on the real logs
(tests/fixtures/reallogs/locked/, thread URLs in the sidecars) and on a planted healthy
fp16 log where one logged norm is the step the loss scaler skipped."""

from __future__ import annotations

from pathlib import Path

import pytest
from logscan_helpers import findings_of

LOCKED = Path(__file__).parents[1] / "fixtures" / "reallogs"  # batch J1_, locked when scored


def _findings(path: Path):
    return [(f.id, f.severity) for f in findings_of(path)]


@pytest.mark.parametrize("name", [
    "J1_fsdp_hf_trainer_grad_norm_nan_with_state_dict_type_deprecation",  # HF Trainer
    "J1_megatron_deepspeed_grad_norm_nan_lm_loss_missing",  # Megatron, every iteration
])
def test_a_non_finite_gradient_norm_is_grad_nonfinite(name):
    assert _findings(LOCKED / f"{name}.log")[0] == ("GRAD_NONFINITE", "error")


def test_one_norm_of_a_step_the_scaler_skipped_is_routine(tmp_path):
    """fp16: the scaler found inf, skipped the step, and the logged norm of that step is
    inf; the next logged norm is finite. The lines are the real texts of the kb examples
    (apex's skip line; HF Trainer's metrics dict)."""
    log = tmp_path / "fp16.log"
    skip = ("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to "
            "32768.0\n")
    log.write_text(skip + "{'loss': 2.3153, 'grad_norm': inf, 'learning_rate': 8e-07, "
                          "'epoch': 0.1}\n"
                          "{'loss': 2.2711, 'grad_norm': 1.93, 'learning_rate': 8e-07, "
                          "'epoch': 0.2}\n")
    assert not [f for f in _findings(log) if f[1] == "error"]
    # ... but a second non-finite norm is no routine skip
    log.write_text(log.read_text() + "{'loss': 2.2711, 'grad_norm': nan, "
                                     "'learning_rate': 8e-07, 'epoch': 0.3}\n")
    assert _findings(log)[0] == ("GRAD_NONFINITE", "error")


def test_ray_actor_prefixes_come_off_and_name_the_rank():
    """Ray prefixes each worker's lines with its actor: the traceback after it is the
    rank's own (the Megatron-on-Ray log of run 7 had its traceback hidden behind it)."""
    from ddpdoctor.diagnose.reader import split_rank_prefix

    assert split_rank_prefix("(worker6, rank=6, pid=8930, ip=10.42.3.242)   File "
                             "\"/opt/megatron-lm/megatron/core/datasets/gpt_dataset.py\", "
                             "line 111, in __init__") == \
        (6, "  File \"/opt/megatron-lm/megatron/core/datasets/gpt_dataset.py\", line 111, "
            "in __init__")
    assert split_rank_prefix("(RayTrainWorker pid=5, ip=10.0.0.1) x") == (None, "x")
    assert split_rank_prefix("(note) x") == (None, "(note) x")
    found = _findings(LOCKED / "J1_megatron_index_files_only_first_node_local_storage.log")
    assert found and found[0][1] == "error"  # never healthy (its last line was cut)


def test_a_ray_tune_trial_that_failed_is_no_healthy_run():
    found = _findings(LOCKED / "J1_ray_train_nccl_socket_ifname_default_wireless_nic.log")
    assert found and found[0][1] == "error"


def test_a_frameworks_performance_advice_is_said_after_any_failure(tmp_path):
    """DDP's "did not find any unused parameters" and Lightning's "may be a bottleneck"
    are advice from jobs that run on (J1_ddp_spawn...: slow epochs, fixed by acting on
    them): reported at their own severity, never an error, and after what went wrong."""
    slow = LOCKED / "J1_ddp_spawn_nonpersistent_workers_find_unused_slow_epochs.log"
    assert _findings(slow) == [("DATALOADER_BOTTLENECK", "warning"),
                               ("DDP_FIND_UNUSED_OVERHEAD", "info")]
    few = ("/x/pytorch_lightning/trainer/connectors/data_connector.py:441: The 'val_dataloader'"
           " does not have many workers which may be a bottleneck. Consider increasing the "
           "value of the `num_workers` argument` to `num_workers=15` in the `DataLoader` to "
           "improve performance.\n")
    crash = (LOCKED.parent / "logs" / "exception.log").read_text()
    log = tmp_path / "both.log"
    log.write_text(few + crash)
    got = _findings(log)
    assert got[0] == ("RANK_CRASHED", "error") and got[-1] == ("DATALOADER_BOTTLENECK",
                                                                 "warning")
