"""Rank output the launcher writes to files (DeepSpeed's --enable_each_rank_log, torchrun's
--log-dir with --redirects): run's crash triage reads it there, with the rank it names.
Units on the command lines; end to end with the real launchers."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

import pytest
from run_helpers import PY, RunJob, findings, run_all, trainer

from ddpdoctor.run.redirected import rank_logs, redirect_of

# Its process-starting tests run in `make test-e2e` (docs/development.md, "Two tiers").
pytestmark = pytest.mark.matrix

DS_SCRIPT = str(Path(__file__).parents[1] / "fixtures" / "deepspeed" / "ds_train.py")


def test_deepspeed_each_rank_log_is_a_redirect(tmp_path):
    r = redirect_of(["deepspeed", "--enable_each_rank_log", "logs", "--num_gpus", "2",
                     "train.py"], tmp_path)
    assert r is not None and r.directory == tmp_path / "logs" and r.paths_name_ranks
    assert redirect_of(["/venv/bin/deepspeed", "--enable_each_rank_log=None", "t.py"],
                       tmp_path) is None
    assert redirect_of(["deepspeed", "t.py"], tmp_path) is None


def test_torchrun_redirects_without_tee_are_a_redirect(tmp_path):
    cmd = [PY, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--log-dir", "ld",
           "--redirects", "3", "train.py"]
    r = redirect_of(cmd, tmp_path)
    assert r is not None and r.directory == tmp_path / "ld" and r.paths_name_ranks
    # --tee: the console has every line already
    assert redirect_of(cmd[:-1] + ["--tee", "3", "train.py"], tmp_path) is None
    # no redirect: the log dir holds the error files only
    assert redirect_of(["torchrun", "--log-dir", "ld", "train.py"], tmp_path) is None
    # local ranks in the paths name no global rank on a multi-node job
    r = redirect_of(["torchrun", "--nnodes", "2", "--log_dir", "ld", "-r", "3", "t.py"],
                    tmp_path)
    assert r is not None and not r.paths_name_ranks


def test_the_training_scripts_own_flags_are_not_the_launchers(tmp_path):
    """``--log-dir`` / ``--redirects`` after the script (or after torchrun's ``-m``
    module) are the script's: no launcher redirect."""
    script_args = ["--log-dir", "ld", "--redirects", "3"]
    assert redirect_of(["torchrun", "--nproc-per-node", "2", "train.py", *script_args],
                       tmp_path) is None
    assert redirect_of([PY, "-m", "torch.distributed.run", "-m", "pkg.train", *script_args],
                       tmp_path) is None
    assert redirect_of(["deepspeed", "train.py", "--enable_each_rank_log", "logs"],
                       tmp_path) is None
    # the launcher's own, with the script's after it
    r = redirect_of(["torchrun", "--log-dir", "ld", "-r", "3", "-m", "pkg.train", "--tee",
                     "3"], tmp_path)
    assert r is not None and r.directory == tmp_path / "ld"


def test_only_the_files_the_job_wrote_are_read(tmp_path):
    r = redirect_of(["deepspeed", "--enable_each_rank_log", "logs", "t.py"], tmp_path)
    assert r is not None
    (tmp_path / "logs").mkdir()
    old = tmp_path / "logs" / "20260101000000_rank0.log"
    old.write_text("an earlier run\n")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    since = time.time() - 5
    new = tmp_path / "logs" / "20261127120000_rank1.log"
    new.write_text("this run\n")
    assert rank_logs(r, since) == [new]
    assert rank_logs(redirect_of(["deepspeed", "--enable_each_rank_log", "absent", "t.py"],
                                 tmp_path), since) == []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_run_reads_the_ranks_output_from_the_launchers_files(tmp_path):
    jobs = [RunJob("torchrun", tmp_path / "torchrun",
                   trainer("--steps", "5", "--inject", "crash@1:2")[:3]
                   + ["--log-dir", "ranklogs", "--redirects", "3"]
                   + trainer("--steps", "5", "--inject", "crash@1:2")[3:],
                   ["--hang-timeout", "60"])]
    if importlib.util.find_spec("deepspeed") is not None:
        from ports import free_port
        from test_run_deepspeed_e2e import _deepspeed

        jobs.append(RunJob("deepspeed", tmp_path / "deepspeed",
                           [_deepspeed(), "--enable_each_rank_log", "ranklogs", "--num_gpus",
                            "2", "--master_port", str(free_port()), DS_SCRIPT, "--fault",
                            "raise", "--fault-rank", "0"],
                           ["--hang-timeout", "60"], env={"DS_ACCELERATOR": "cpu"}))
    run_all(jobs, deadline_s=260)
    for job, culprit in zip(jobs, (1, 0)):
        assert job.returncode == 1, (job.name, job.output[-3000:])
        report = job.report()
        lead = report["findings"][0]
        assert (lead["id"], lead["ranks"]) == ("RANK_CRASHED", [culprit]), \
            (job.name, findings(report), job.output[-3000:])
        files = report["probes"]["crash triage"]["data"]["rank_files"]
        assert files and all("ranklogs" in f for f in files), files
        assert any("/ranklogs/" in line for line in lead["evidence"]["lines"]), lead

    # DeepSpeed's console had the launcher's lines only: the rank's error came from a file
    if len(jobs) == 2:
        console = (jobs[1].run_dir / "output.log").read_text(errors="replace")
        assert "planted fault" not in console
