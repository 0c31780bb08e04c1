"""Blind run 67's lessons (batches X85, X87 and X88), each a family:

- torchelastic's agent restarting the worker group ("Worker group FAILED. 1/1 attempts
  left; will restart worker group", or nodes that joined) starts a new attempt: where
  that attempt went on to the agent's "worker group successfully finished" (torchelastic's
  "All workers successfully finished") with no failure after the restart, the failure
  before it was recovered: said as a warning, the job not failed. A healthy elastic run
  that scaled down and back up was called failed.
- "Distributed package doesn't have NCCL built in": the torch build lacks the backend the
  code asked for (Windows and macOS wheels have no NCCL): `ENV_NCCL_CONFIG`, fix the
  config, not a crash of the rank's code.

Real logs, URLs in their sidecars; the recorded one in tests/fixtures/logs/README.md."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of, lines_of

from ddpdoctor.core.next_step import Action, decide

DIR = Path("tests/fixtures/reallogs")
RECORDED = Path("tests/fixtures/logs/restart_recovers.log")
RESTART_LINE = 60  # the agent's "will restart worker group"


def test_a_failure_the_elastic_restart_recovered_is_a_warning():
    for path, lead_id, ranks in ((RECORDED, "RANK_CRASHED", [1]),
                                 (DIR / "X85_torchelastic_scale_down_restart_resumes.log",
                                  "COMM_CONNECTIVITY", [])):
        found = findings_of(path)
        assert [(f.id, f.ranks, f.severity) for f in found][:1] == [
            (lead_id, ranks, "warning")], path
        assert all(f.severity != "error" for f in found), path
        assert found[0].title.startswith("an earlier attempt in this log failed")
        assert "restarted the worker group" in found[0].title
        assert decide(found).action is Action.NONE


def test_a_restart_that_fails_again_stays_the_jobs_failure(tmp_path):
    """The attempt after the restart failed the same way: no recovery."""
    again = lines_of(RECORDED, 1, RESTART_LINE) + lines_of(RECORDED, 53, 59)
    lead = findings_in(tmp_path, again)[0]
    assert (lead.id, lead.ranks, lead.severity) == ("RANK_CRASHED", [1], "error")


def test_a_restart_the_log_ends_at_proves_nothing(tmp_path):
    """Nothing after the restart line: the next attempt may never have got going."""
    cut = lines_of(RECORDED, 1, RESTART_LINE + 3)
    lead = findings_in(tmp_path, cut)[0]
    assert (lead.id, lead.severity) == ("RANK_CRASHED", "error")


def test_a_backend_the_torch_build_lacks_is_a_config_error(tmp_path):
    for name in ("X87_windows_torchrun_llama_nccl_not_built_in",
                 "J1_mp_spawn_windows_nccl_backend_not_built_in_hubert"):
        found = findings_of(DIR / f"{name}.log")
        lead = found[0]
        assert (lead.id, lead.evidence["family"]) == ("ENV_NCCL_CONFIG", "family_backend"), name
        assert "doesn't have NCCL" in lead.title
        assert decide(found).action is Action.FIX_CONFIG
    # the same check's MPI wording (torch/distributed/distributed_c10d.py)
    mpi = findings_in(tmp_path, "RuntimeError: Distributed package doesn't have MPI built in. "
                                "MPI is only included if you build PyTorch from source on a "
                                "host that has MPI installed.\n")
    assert [f.id for f in mpi] == ["ENV_NCCL_CONFIG"]


def test_transformers_staged_checkpoint_rename_race_is_the_known_bug(tmp_path):
    """From the development set's misses the same day: two logs of one upstream bug,
    transformers' staging directory renamed by several processes (4.36.0 - 4.37.1, and a
    main-branch build of February 2025)."""
    for name in ("L3_fail_hf_trainer_ckpt_rename_race_axolotl",
                 "F2_hf_trainer_ckpt_rename_fileexists_transformers_dev"):
        found = findings_of(DIR / f"{name}.log")
        assert (found[0].id, found[0].evidence["bug"]) == (
            "KNOWN_UPSTREAM_BUG", "transformers-staged-checkpoint-rename-race"), name
        assert decide(found).action is Action.FIX_CONFIG
    # hiyouga/LlamaFactory#2010's line (transformers 4.36.2, ZeRO-3, torch.distributed.run)
    line = ("FileNotFoundError: [Errno 2] No such file or directory: '/mnt/nas/abc/saved_model/"
            "mixtral-8x7b-title-desc-mix-4e-6-5epoch/tmp-checkpoint-162' -> '/mnt/nas/abc/"
            "saved_model/mixtral-8x7b-title-desc-mix-4e-6-5epoch/checkpoint-162'\n")
    assert findings_in(tmp_path, line)[0].id == "KNOWN_UPSTREAM_BUG"
    # a checkpoint that is simply missing is not the race
    plain = "FileNotFoundError: [Errno 2] No such file or directory: 'out/checkpoint-100'\n"
    assert "KNOWN_UPSTREAM_BUG" not in [f.id for f in findings_in(tmp_path, plain)]
