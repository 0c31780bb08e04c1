"""An exception whose message says a gradient or a loss went NaN/Inf is the non-finite
family, whoever raised it (found among the development set's misses: Megatron's "found NaN
in local grad norm" assert, a RANK_CRASHED before); GradScaler's complaint that no inf
checks were recorded is about the code, not a value, and stays a crash."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

REAL = Path("tests/fixtures/reallogs")


def test_a_nan_guard_in_the_training_code_is_grad_nonfinite():
    lead = findings_of(REAL / "F5_megatron_patch_nan_grad_norm_pp.log")[0]
    assert lead.id == "GRAD_NONFINITE"
    assert "found NaN in local grad norm" in lead.title


def test_grad_scalers_no_inf_checks_is_a_crash(tmp_path):
    # produced by running torch 2.13: GradScaler("cpu").scale(loss) with no backward, then
    # scaler.step(optimizer)
    text = ("[rank1]: AssertionError: No inf checks were recorded for this optimizer.\n")
    lead = findings_in(tmp_path, text)[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [1])
