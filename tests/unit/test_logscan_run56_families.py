"""Blind run 56's lesson (batches X57, X58): the same exception printed once by each process
torchrun's summary says failed (all with one exit code), none of the copies with a rank
(a Hydra app's "Error executing job" and its traceback on both ranks of a 2-GPU job). Each
copy is one of those ranks': the finding names them all, not only the rank torchrun
happened to see die first. Which copy is whose cannot be told and does not matter.

Real logs, URLs in their sidecars; the variants are cut from them."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

DIR = Path("tests/fixtures/reallogs")
BOTH = DIR / "X57_stale_checkpoint_optimizer_param_groups_ddp.log"


def test_one_identical_traceback_per_failed_rank_names_every_failed_rank():
    lead = findings_of(BOTH)[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [0, 1])
    assert "different number of parameter groups" in lead.title


def test_one_traceback_for_two_failed_ranks_stays_the_first_failed_ranks(tmp_path):
    lines = BOTH.read_text().splitlines(keepends=True)
    second = next(i for i, line in enumerate(lines) if i > 36 and "Traceback" in line)
    text = "".join(lines[:second] + lines[second + 14:])  # rank 1's copy cut out
    assert "different number of parameter groups" in text
    lead = findings_in(tmp_path, text)[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [1])


def test_two_different_tracebacks_are_not_shared_out(tmp_path):
    text = BOTH.read_text().replace(
        "ValueError: loaded state dict has a different number of parameter groups",
        "ValueError: other", 1)
    assert findings_in(tmp_path, text)[0].ranks != [0, 1]


def test_a_checkpoint_from_another_run_is_a_config_fix_a_keys_mismatch_a_code_fix():
    """The next steps this run's review taught: a checkpoint whose optimizer groups or
    recorded settings disagree with the run's (resumed from another run's directory, or
    the config changed) is fixed in the launch; a model whose keys do not match its state
    dict ("Error(s) in loading state_dict": the DDP 'module.' prefix) in the code."""
    from ddpdoctor.core.next_step import Action, decide

    assert decide(findings_of(BOTH)).action is Action.FIX_CONFIG
    megatron = DIR / "K1_megatron_resume_annealinglr_min_lr_checkpoint_mismatch_assertion.log"
    assert decide(findings_of(megatron)).action is Action.FIX_CONFIG
    keys = DIR / "L3_fail_ddp_load_missing_keys_unimatch.log"
    assert decide(findings_of(keys)).action is Action.FIX_CODE


def test_a_programs_own_stop_is_run_again():
    from ddpdoctor.core.next_step import Action, decide

    for name in ("X53_mfu_gate_stop_exit65_all_ranks",
                 "X55_vila_timeout_callback_exit124_all_ranks_planned_stop"):
        assert decide(findings_of(DIR / f"{name}.log")).action is Action.RESTART, name
