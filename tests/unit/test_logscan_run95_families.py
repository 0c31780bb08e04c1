"""Blind run 95's lessons (batches XF9 and XG1, committed run logs; URLs in the sidecars),
each a mechanism with the real log as its case and a variant that shows the mechanism, not
the wording, decides:

- Open MPI's fatal error handler ("*** An error occurred in MPI_Bcast") on a rank is that
  rank's communication failure; srun's kills after it are the abort, not an OOM kill.
- srun's report of a step's task that ended before the trainer said it completed ended an
  earlier step of the batch script (a set-up helper): a warning, not the job's failure.
- torch.distributed.launch's CalledProcessError names the child by its --local_rank: the
  root of a failure whose traceback carries no rank.
- py-spy dumps where some processes wait on the device (a host sync in torch's tensor
  formatting) while the others are elsewhere: a hang, the others never entered.
- A job stopped by Ctrl-C is said after a framework's advice, as information.
- A known bug known by where the library raises it (DeepSpeed's hybrid engine _fuse_lora).
"""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import errors_of, findings_in, findings_of

R = Path("tests/fixtures/reallogs")
MPI = R / "XG1_mpi_backend_ucx_bcast_abort_srun.log"
HELPER = R / "XF9_nemo_llama2_70b_lora_tp4_srun_helper_error_success.log"
ORDINAL = R / "XG1_frnet_mmdet3d_invalid_device_ordinal.log"
DUMP = R / "XG1_modded_nanogpt_inductor_deadlock_pyspy.log"
SIGINT = R / "XG1_signlang_ddp_find_unused_overhead_sigint.log"
FUSE = R / "XF9_dschat_step3_hybrid_engine_lora_fuse_mismatch.log"


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def test_an_mpi_call_that_failed_is_that_ranks_communication_failure():
    found = findings_of(MPI)
    assert errors_of(found) == [("COMM_CONNECTIVITY", [0])]
    assert "MPI_Bcast failed on rank 0" in found[0].title
    assert "ucx send failed" in found[0].title


def test_the_same_block_on_another_rank_names_that_rank(tmp_path):
    text = "".join(ln.replace("0: [cgpu17:53890] ", "1: [cgpu17:53891] ")
                   .replace("MPI_Bcast", "MPI_Allreduce") for ln in _lines(MPI))
    found = findings_in(tmp_path, text)
    assert errors_of(found) == [("COMM_CONNECTIVITY", [1])]
    assert "MPI_Allreduce failed on rank 1" in found[0].title


def test_without_the_mpi_block_the_kills_are_read_as_before(tmp_path):
    text = "".join(ln for ln in _lines(MPI) if "*** " not in ln and "pml_ucx" not in ln)
    assert errors_of(findings_in(tmp_path, text))[0][0] != "COMM_CONNECTIVITY"


def test_a_helper_steps_death_before_the_training_completed_is_a_warning():
    found = findings_of(HELPER)
    assert errors_of(found) == []
    assert found[0].id == "UNRECOGNIZED_FAILURE" and found[0].severity == "warning"
    assert found[0].title.startswith("a step of the batch script failed before the training")


def test_the_same_report_after_the_completion_line_is_the_ranks_exit(tmp_path):
    """Reported after the trainer said it completed, the task is the training's: its
    rank crashed at exit (the existing reading), not an earlier step of the script."""
    lines = _lines(HELPER)
    report = next(ln for ln in lines if ln.startswith("srun: error:"))
    text = "".join(ln for ln in lines if ln is not report) + report
    found = findings_in(tmp_path, text)
    assert found[0].id == "RANK_CRASHED" and found[0].severity == "warning"
    assert found[0].title.startswith("rank 0 crashed at exit")


def test_the_legacy_launchers_report_names_no_child():
    # its command is the spawning loop's last (torch/distributed/launch.py v1.8), whichever
    # child died: --local_rank=1 says two processes ran, not which failed
    assert errors_of(findings_of(ORDINAL)) == [("GPU_DEVICE_MAPPING", [])]


def test_processes_waiting_on_the_device_while_others_are_elsewhere_are_a_hang():
    found = findings_of(DUMP)
    assert errors_of(found) == [("HANG_RANK_MISSING_COLLECTIVE", [])]
    assert found[0].title.startswith("2 of 8 dumped processes are elsewhere")
    assert "6 wait on the device" in found[0].title


def _processes(path: Path) -> list[str]:
    """The dump's blocks, one per process (each starts at its "PID:" line)."""
    blocks: list[str] = []
    for ln in _lines(path):
        if ln.startswith("PID:") or not blocks:
            blocks.append("")
        blocks[-1] += ln
    return blocks


def test_every_process_in_one_place_is_no_split(tmp_path):
    synced = [b for b in _processes(DUMP) if "__format__" in b]
    assert len(synced) == 6
    assert errors_of(findings_in(tmp_path, "".join(synced))) == []


def test_without_the_device_sync_frame_the_split_is_not_called_a_hang(tmp_path):
    text = "".join(ln for ln in _lines(DUMP) if "__format__" not in ln)
    assert errors_of(findings_in(tmp_path, text)) == []


def test_a_stop_by_hand_is_said_after_the_frameworks_advice():
    found = findings_of(SIGINT)
    assert errors_of(found) == []
    assert found[0].id == "DDP_FIND_UNUSED_OVERHEAD"
    stop = next(f for f in found if f.title.startswith("the job was interrupted"))
    assert stop.severity == "info"


def test_a_known_bug_is_known_by_where_the_library_raises_it():
    found = findings_of(FUSE)
    assert errors_of(found)[0] == ("KNOWN_UPSTREAM_BUG", [0])
    assert found[0].evidence["upstream"] == "https://github.com/deepspeedai/DeepSpeed/issues/3543"


def test_the_same_message_raised_in_the_users_code_is_not_that_bug(tmp_path):
    text = FUSE.read_text().replace("hybrid_engine.py\", line 137, in _fuse_lora",
                                    "hybrid_engine.py\", line 137, in _my_fuse")
    assert errors_of(findings_in(tmp_path, text))[0][0] == "RANK_CRASHED"
