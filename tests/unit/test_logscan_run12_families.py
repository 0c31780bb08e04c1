"""Evidence families learned from locked run 12 (batch P1_, scored blind first): slurm's
cancel with no reason is a job stopped (a warning), not a failure; env:// rendezvous
without a launcher's variables is a rendezvous set-up error; set_epoch on a sampler that
is not distributed is a missing DistributedSampler. Lines from the batch's real logs
(thread URLs in their sidecars, tests/fixtures/reallogs/P1_*)."""

from __future__ import annotations

from logscan_helpers import findings_in

# the run's own last iteration lines (P1_megatron_benchmark_slurm_cancelled)
_LOSS = [line + "\n" for line in open(
    "tests/fixtures/reallogs/P1_megatron_benchmark_slurm_cancelled.log").read().splitlines()
    if line.startswith((" iteration      190/", " iteration      200/"))]


_CANCEL = ("Killing subprocess 50083\nKilling subprocess 73024\n"
           "slurmstepd: error: *** STEP 1809562.0 ON r6i5n1 CANCELLED AT "
           "2021-05-23T08:29:53 ***\nKilling subprocess 73026\n"
           "slurmstepd: error: *** JOB 1809562 ON r6i5n1 CANCELLED AT 2021-05-23T08:29:53 ***\n")


def test_a_cancel_with_no_reason_before_the_end_is_a_failure(tmp_path):
    # the job did not finish and the log does not say why: a job cancelled because it hung
    # reads the same as one cut on purpose, so it is never said as healthy
    assert len(_LOSS) == 2
    [f] = findings_in(tmp_path, "".join(_LOSS) + _CANCEL)
    assert (f.id, f.severity) == ("UNRECOGNIZED_FAILURE", "error")
    assert "cancelled with no reason" in f.title and "before the job finished" in f.title
    assert "sacct" in f.evidence["hint"]


def test_a_cancel_with_no_reason_after_the_trainer_completed_is_a_warning(tmp_path):
    # Lightning's real closing line (`Trainer.fit` stopped: `max_epochs=N` reached.), as in
    # the corpus's completed runs, then the same cancel (slurm's lines only)
    done = "`Trainer.fit` stopped: `max_epochs=3` reached.\n"
    cancel = "".join(line + "\n" for line in _CANCEL.splitlines() if "CANCELLED" in line)
    [f] = findings_in(tmp_path, "".join(_LOSS) + done + cancel)
    assert (f.id, f.severity) == ("UNRECOGNIZED_FAILURE", "warning")
    assert "after the trainer said it completed" in f.title


def test_a_cancel_for_a_reason_stays_a_failure(tmp_path):
    [f, *_] = findings_in(tmp_path, "slurmstepd: error: *** JOB 18886 ON compute-permanent-"
                                  "node-954 CANCELLED AT 2023-11-24T10:25:54 DUE TO TIME "
                                  "LIMIT ***\n")
    assert f.severity == "error"


def test_a_time_limit_after_the_trainer_completed_is_a_warning(tmp_path):
    # what the scheduler stopped ran after the training (an evaluation, an upload, a hang
    # at exit): not "a process crashed at exit", and not a failed training
    done = "`Trainer.fit` stopped: `max_epochs=3` reached.\n"
    stop = ("slurmstepd: error: *** JOB 18886 ON compute-permanent-node-954 CANCELLED AT "
            "2023-11-24T10:25:54 DUE TO TIME LIMIT ***\n")
    [f] = findings_in(tmp_path, "".join(_LOSS) + done + stop)
    assert (f.id, f.severity) == ("UNRECOGNIZED_FAILURE", "warning")
    assert f.title.startswith("the scheduler stopped the job (time limit)")
    assert "after the trainer said it completed" in f.title


def test_a_cancel_beside_another_failure_is_that_failure(tmp_path):
    [f, *_] = findings_in(tmp_path, "srun: error: gpu001: task 0: Out Of Memory\n"
                                  "slurmstepd: error: *** STEP 6053.0 ON DEL2212S020 CANCELLED "
                                  "AT 2024-04-23T12:18:08 ***\n")
    assert (f.id, f.severity) == ("OOM", "error")


def test_env_rendezvous_without_the_launchers_variables(tmp_path):
    [f, *_] = findings_in(tmp_path, "Traceback (most recent call last):\n"
                                  "ValueError: Error initializing torch.distributed using env:// "
                                  "rendezvous: environment variable MASTER_ADDR expected, but "
                                  "not set\n")
    assert (f.id, f.severity) == ("ENV_RENDEZVOUS_UNREACHABLE", "error")
    assert "MASTER_ADDR" in f.title and "torchrun" in f.title


def test_set_epoch_on_a_sampler_that_is_not_distributed(tmp_path):
    [f, *_] = findings_in(tmp_path, "AttributeError: 'RandomSampler' object has no attribute "
                                  "'set_epoch'\n")
    assert (f.id, f.severity) == ("SAMPLER_MISSING", "error")
