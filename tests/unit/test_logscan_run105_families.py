"""Blind run 105's lessons (batches XH5 and XH6, committed run logs; URLs in the sidecars),
mechanisms with the real logs as their cases and variants that show the mechanism decides:

- Python's FloatingPointError (detectron2's guards on its losses and on its predicted
  boxes, numpy's seterr) and a guard's "NaN ... diverged" are the numbers going
  non-finite, whichever value the guard looked at: GRAD_NONFINITE, not a crash.
- An NCCL error the watchdog reported asynchronously, after which the job said its
  training completed and no process was reported dead, did not end the job: a warning.
  A trainer's closing banner ("Phase 3 Training Complete!") is its completion line; an
  epoch's "training complete" is not.
"""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import errors_of, findings_in, findings_of

from ddpdoctor.diagnose.kb import match_line

R = Path("tests/fixtures/reallogs")
DIVERGED = R / "XH6_detectron2_ddp6_rpn_nan_diverged.log"
OUTLIVED = R / "XH6_torchrun_4gpu_finished_with_final_ncclsystemerror.log"
# torchrun's summary of a failed worker, from a dev-set log (its lines as they are there)
SUMMARY = R / "X15_ulysses_seq34000_cuda_oom_all_8_ranks_2node_torchrun.log"


def test_a_floating_point_error_is_the_numbers_going_non_finite():
    found = findings_of(DIVERGED)
    assert errors_of(found) == [("GRAD_NONFINITE", [])]
    assert "FloatingPointError: Predicted boxes or scores contain Inf/NaN" in found[0].title


def test_nan_that_diverged_said_by_another_exception_is_the_same_family(tmp_path):
    text = DIVERGED.read_text().replace("FloatingPointError: Predicted",
                                        "RuntimeError: Predicted")
    assert errors_of(findings_in(tmp_path, text))[0][0] == "GRAD_NONFINITE"
    # ... and without the non-finite words it is a crash like any other
    plain = text.replace("contain Inf/NaN. Training has diverged.", "are empty.")
    assert errors_of(findings_in(tmp_path, plain))[0][0] == "RANK_CRASHED"


def test_a_job_that_completed_after_an_async_nccl_error_is_not_failed():
    found = findings_of(OUTLIVED)
    assert errors_of(found) == []
    [warn] = [f for f in found if f.id == "COMM_CONNECTIVITY"]
    assert warn.severity == "warning" and "Phase 3 Training Complete!" in warn.title
    assert warn.evidence["completed"].endswith(":221")


def test_without_the_completion_the_async_error_is_a_failure(tmp_path):
    text = OUTLIVED.read_text()
    # the log ends after the error, before the final save and the banner
    cut = text[:text.index("  Saved checkpoint: runs/telepathy_v3_20251128_182147/"
                           "bridge_v3_final_step2000.pt")]
    assert errors_of(findings_in(tmp_path, cut))[0][0] == "COMM_CONNECTIVITY"


def test_a_death_reported_after_the_async_error_keeps_it_a_failure(tmp_path):
    summary = [x for x in SUMMARY.read_text(errors="replace").splitlines(keepends=True)
               if "failed (exitcode: 1)" in x]
    text = OUTLIVED.read_text() + summary[0]
    assert errors_of(findings_in(tmp_path, text))


def test_a_closing_banner_is_the_trainers_completion_line_an_epochs_is_not():
    def done(line: str) -> bool:
        return any(sig.name == "trainer.completed" for sig, _ in match_line(line))

    assert done("Phase 3 Training Complete!")
    assert done("[rank0]:[titan] 2026-05-18 16:05:29,420 - root - INFO - Training completed")
    assert not done("Epoch 3 training complete")
    assert not done("Step 500: training complete!")
    assert not done("Training complete for this epoch, starting validation")


def test_the_process_taken_down_after_the_async_error_keeps_it_a_failure(tmp_path):
    # ProcessGroupNCCL's own words for the process it ends (F1_timeout_rank0_evaluating_ufld)
    down = [x for x in (R / "F1_timeout_rank0_evaluating_ufld.log").read_text().split("\n")
            if "taking the entire process down" in x][0]
    text = OUTLIVED.read_text().replace("  Saved checkpoint: runs/telepathy_v3_20251128_182147"
                                        "/bridge_v3_final_step2000.pt",
                                        down + "\n  Saved checkpoint: runs/telepathy_v3_"
                                        "20251128_182147/bridge_v3_final_step2000.pt", 1)
    assert errors_of(findings_in(tmp_path, text))


def test_a_smaller_unit_of_a_run_is_not_its_end():
    def done(line: str) -> bool:
        return any(sig.name == "trainer.completed" for sig, _ in match_line(line))

    for line in ("Fold 1 training complete", "Stage 1 training complete.",
                 "Round 3: local training complete", "Iteration 500 training complete",
                 "Pre-training complete", "Waiting until training complete"):
        assert not done(line), line


def test_a_banner_that_the_jobs_losses_follow_ended_a_part_of_the_run(tmp_path):
    text = OUTLIVED.read_text()
    # the banner, then the run's own loss lines again (a next phase), then the NCCL error
    banner = "Phase 3 Training Complete!\n"
    steps = [x for x in text.split("\n") if x.startswith("[Step ")][:3]
    body = text[:text.index("[rank1]:[E1128")]
    rest = text[text.index("[rank1]:[E1128"):text.index("  Saved checkpoint: runs/telepathy_v3_"
                                                       "20251128_182147/bridge_v3_final_step2000")]
    variant = body + banner + "\n".join(steps) + "\n" + rest
    assert errors_of(findings_in(tmp_path, variant))[0][0] == "COMM_CONNECTIVITY"


def test_a_world_of_one_worker_is_rank_0():
    # run 106 (XH8): Megatron/NeMo's "initializing torch distributed with 1 workers." is a
    # job of one process: its rank-less lines are rank 0's
    log = R / "XH8_nemo_automodel_torchrun_tcpstore_client_hang.log"
    assert errors_of(findings_of(log)) == [("ENV_RENDEZVOUS_UNREACHABLE", [0])]
    assert not any(sig.name == "megatron.world_of_one" for sig, _ in match_line(
        "> initializing torch distributed with 16 workers."))


# numpy 2.4.6's own traceback, produced here (np.seterr(all="raise"); x / 0.0)
NUMPY_RAISED = ('Traceback (most recent call last):\n  File "<string>", line 2, in <module>\n'
                "FloatingPointError: divide by zero encountered in divide\n")
# Megatron's iteration lines (P1_megatron_benchmark_slurm_cancelled.log)
LOSSES = "".join(line + "\n" for line in (
    R / "P1_megatron_benchmark_slurm_cancelled.log").read_text().splitlines()
    if line.startswith((" iteration      190/", " iteration      200/")))


def test_numpys_floating_point_error_in_training_is_the_numbers(tmp_path):
    assert LOSSES.count("lm loss") == 2
    assert errors_of(findings_in(tmp_path, LOSSES + NUMPY_RAISED))[0][0] == "GRAD_NONFINITE"


def test_numpys_floating_point_error_before_any_loss_is_a_crash(tmp_path):
    # a data set's statistics or a preprocessing step under np.seterr(all="raise")
    found = errors_of(findings_in(tmp_path, NUMPY_RAISED + LOSSES))
    assert found[0][0] == "RANK_CRASHED"


def test_an_nccl_system_error_with_no_peer_names_its_system_call_and_shm():
    # XG3_: DDP in Docker, fixed by --ipc=host (the log itself cannot show the container)
    [f] = findings_of(R / "XG3_dekr_docker_nccl_system_error_ipc.log")
    assert (f.id, f.severity) == ("COMM_CONNECTIVITY", "error")
    assert f.title.startswith("NCCL's own system call failed")
    assert "--ipc=host" in f.evidence["hint"] and "NCCL_SOCKET_IFNAME" in f.evidence["hint"]
