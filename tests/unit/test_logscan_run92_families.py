"""Blind run 92's lessons (batch XF6, committed run logs; URLs in their sidecars):

- A launcher's own argument parser refusing its command line ("Accelerate launch command:
  error: argument --machine_rank/--machine-rank: invalid int value: ''") started no rank:
  said, not "No failure found" (argparse's prog may hold spaces); the launch command is
  the fix.
- A DataLoader worker that cannot hand a batch to its rank (torch.multiprocessing's
  reductions, /tmp full) is the workers' failure, not a crash of the job.
- A rank that got SIGTERM from outside (Lightning's "Received SIGTERM: 15"): its
  DataLoader workers dying of the same signal are the stop, not the cause.
- A spawned helper failing as it starts (spawn_main, importing __main__ again) is no
  rank's death where the scheduler's own end of the job is in the log: the time limit
  leads."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import errors_of, findings_in, findings_of

from ddpdoctor.core.next_step import decide

REAL = Path("tests/fixtures/reallogs")
LAUNCH = REAL / "XF6_accelerate_fsdp_launch_empty_machine_rank.log"
TMP_FULL = REAL / "XF6_fairseq_wav2vec_2gpu_tmp_full_dataloader.log"
SIGTERM = REAL / "XF6_lightning_ddp_5gpu_external_sigterm.log"
TIME_LIMIT = REAL / "XF6_mudiff_ddp_slurm_time_limit.log"


def test_a_launcher_refusing_its_command_line_is_said():
    found = findings_of(LAUNCH)
    assert errors_of(found) == [("UNRECOGNIZED_FAILURE", [])]
    assert "Accelerate launch command" in found[0].title and "no rank started" in found[0].title
    assert decide(found).action.value == "fix_config"


def test_a_scripts_own_parser_refusing_stays_its_ranks_crash(tmp_path):
    text = LAUNCH.read_text().replace("Accelerate launch command: error:", "train.py: error:")
    assert errors_of(findings_in(tmp_path, text))[0][0] == "RANK_CRASHED"


def test_a_worker_that_cannot_hand_over_a_batch_is_the_workers():
    found = findings_of(TMP_FULL)
    assert errors_of(found) == [("DATALOADER_WORKER_FAILURE", [])]
    assert "TMPDIR" in str(found[0].evidence.get("hint"))
    assert decide(found).action.value == "fix_config"  # free the disk


def test_workers_killed_by_the_jobs_own_sigterm_are_the_stop():
    found = findings_of(SIGTERM)
    assert errors_of(found) == [("UNRECOGNIZED_FAILURE", [])]
    assert found[0].evidence.get("stopped_by") == "SIGTERM"


def test_workers_killed_by_sigterm_with_no_stop_seen_stay_the_workers(tmp_path):
    text = SIGTERM.read_text(encoding="utf-8", errors="replace").replace(
        "Received SIGTERM: 15", "")
    assert errors_of(findings_in(tmp_path, text))[0][0] == "DATALOADER_WORKER_FAILURE"


def test_a_spawned_helpers_start_up_failure_gives_way_to_the_time_limit():
    found = findings_of(TIME_LIMIT)
    assert errors_of(found) == [("UNRECOGNIZED_FAILURE", [])]
    assert "time limit" in found[0].title
    assert decide(found).action.value == "raise_timeout"


def test_a_spawned_helpers_failure_alone_is_still_said(tmp_path):
    text = "".join(ln for ln in TIME_LIMIT.read_text().splitlines(keepends=True)
                   if "CANCELLED AT" not in ln)
    found = findings_in(tmp_path, text)
    assert errors_of(found) and "ModuleNotFoundError" in found[0].title
