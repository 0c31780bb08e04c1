"""Evidence families learned from locked runs 109 and 110 (batches XI3_ and XI4_, scored
blind first: 8/11 with 2 healthy runs called failed, and 5/7). Real logs (URLs in the
sidecars).

- A warning of a try the job then made good, or a banner logged at an error level, is no
  failure where the job's progress follows it: c10d's client warning that a connect
  failed ("[W socket.cpp:697] ... errno: 99"), I-JEPA's "CRITICAL:root:PRETRAINING", then
  300 epochs (index._outlived). Cut before any progress, the same lines stay failures.
- The progress lines of two common trainer formats are losses: PyTorch's tutorial's
  "[epoch, batch] loss: x" (I-JEPA) and the MetricLogger of DeiT/MAE/DINO/4M ("[i/n]  eta:
  ...  loss: 3.6128 (4.1114)").
- Non-finite gradient norms only, on lines that carry a dynamic loss scale that halved,
  with the losses going on after them, are the norms of steps the fp16 scaler skipped: a
  warning. Losses the scanner's cap no longer keeps still count as going on (the kept
  one says where the last of them was).
"""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import errors_of, findings_in, findings_of, lines_of

from ddpdoctor.diagnose import LogInput, scan_inputs
from ddpdoctor.diagnose.events import EventKind

R = Path("tests/fixtures/reallogs")
IJEPA = R / "XI3_ijepa_in100_4rank_pretrain_healthy.log"
NANO = R / "XI3_cs503_nano4m_2node_gradnorm_nan_healthy.log"


def _losses(path: Path) -> int:
    evs = scan_inputs([LogInput(str(path), rank_from_path=False)]).events
    return sum(1 + e.repeats for e in evs if e.kind is EventKind.LOSS_VALUE)


def test_warnings_the_jobs_progress_follows_are_no_failure():
    assert errors_of(findings_of(IJEPA)) == []
    assert _losses(IJEPA) > 300


def test_the_same_connect_warnings_with_nothing_after_stay_a_failure(tmp_path):
    assert errors_of(findings_in(tmp_path, lines_of(IJEPA, 1, 2)))[0][0] == \
        "ENV_RENDEZVOUS_UNREACHABLE"


def test_a_record_logged_critical_with_nothing_after_stays_a_failure(tmp_path):
    assert errors_of(findings_in(tmp_path, lines_of(IJEPA, 57, 57)))[0][0] == \
        "UNRECOGNIZED_FAILURE"


def test_scaled_non_finite_norms_the_losses_go_on_after_are_a_warning():
    found = findings_of(NANO)
    assert errors_of(found) == []
    [warn] = [f for f in found if f.id == "GRAD_NONFINITE"]
    assert warn.severity == "warning" and warn.title.startswith("2 logged gradient norms")
    assert _losses(NANO) > 300


def test_the_same_norms_at_the_end_of_the_log_are_the_failure(tmp_path):
    found = findings_in(tmp_path, lines_of(NANO, 1, 612))
    assert errors_of(found)[0][0] == "GRAD_NONFINITE"


def test_norms_past_the_cap_that_end_the_log_are_the_failure(tmp_path):
    # 205 scaler-skipped norms each followed by a finite step, then 30 more and nothing
    # after: the last of them (past the scanner's cap) ends the log, not a kept one
    lines = NANO.read_text().splitlines(keepends=True)
    nan, finite = lines[610], lines[612]
    assert "grad_norm: nan" in nan and "grad_norm: nan" not in finite
    text = "".join(lines[:610]) + (nan + finite) * 205 + nan * 30
    found = findings_in(tmp_path, text)
    assert errors_of(found)[0][0] == "GRAD_NONFINITE"


def test_one_loss_after_a_connect_warning_in_a_long_run_is_not_going_on(tmp_path):
    # 210 losses before the warnings, one after: the cap's count of repeats is the whole
    # log's, not what followed the warnings
    lines = IJEPA.read_text().splitlines(keepends=True)
    losses = [x for x in lines if "] loss:" in x]
    text = "".join(lines[2:57]) + "".join(losses[:210]) + "".join(lines[:2]) + losses[210]
    assert errors_of(findings_in(tmp_path, text))[0][0] == "ENV_RENDEZVOUS_UNREACHABLE"


def test_an_evaluation_meter_is_not_a_training_loss():
    # the MetricLogger's evaluation lines, from the corpus (XC9_healthy_apex_ddp_food101_
    # overflow_skip, XI3_cs503_nano4m_caption_2node_healthy)
    from ddpdoctor.diagnose import kb
    evals = [x for name in ("XC9_healthy_apex_ddp_food101_overflow_skip",
                            "XI3_cs503_nano4m_caption_2node_healthy")
             for x in (R / f"{name}.log").read_text().splitlines()
             if x.startswith(("Validate:  [", "[Eval]/  ["))]
    assert len(evals) >= 2
    for line in evals:
        assert not [s for s, _ in kb.match_line(line) if s.name == "metrics.loss_value"]


TITAN = R / "XI5_torchtitan_pp4_slurm_time_limit.log"


def test_non_finite_norms_that_finite_losses_follow_are_a_warning_scaler_or_not():
    # run 111: torchtitan's pipeline stages log grad_norm inf at step 1 (no loss scaler),
    # then 1,520 finite steps until slurm's time limit: the time limit is the failure
    found = findings_of(TITAN)
    assert errors_of(found) == [("UNRECOGNIZED_FAILURE", [])]
    assert found[0].title.startswith("the scheduler stopped the job (time limit)")
    assert [f.severity for f in found if f.id == "GRAD_NONFINITE"] == ["warning"]


def test_the_same_norms_with_no_step_after_them_are_the_failure(tmp_path):
    lines = TITAN.read_text().splitlines(keepends=True)
    last_inf = max(i for i, x in enumerate(lines) if "grad_norm:     inf" in x)
    assert errors_of(findings_in(tmp_path, "".join(lines[:last_inf + 1])))[0][0] == \
        "GRAD_NONFINITE"
