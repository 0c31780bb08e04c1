"""Blind run 58's lessons (batches X63, X64, X65 and X66), each a family:

- c10d's socket code logs a connect that failed at level W ("[W socket.cpp:663] ... The
  client socket has failed to connect") and retries. Resting only on such records, in a log
  where nothing else failed and the job printed on after the last of them, a rendezvous
  finding is a warning; the same record at the log's end may be a connect that never got
  through, and stays an error.
- NCCL's "Duplicate GPU detected" from a communicator made while every process still sat
  on one GPU (a start-up probe), after which the job trained: a warning, not the fault.
- PBS's "Job N has exceeded memory allocation on node X" is the host's memory limit; the
  rank is the one mpirun says died of signal 9. A failure leads what the job went on from.
- A trainer's own progress line ("Epoch 1 | iter 3 step 3 | loss train: 1.288") is a loss:
  the losses that show a job went on. A bare "loss=" is not looked for: it is on every line
  of an ordinary log, and the reader's speed rests on needles that are not.
- ROCm 6.2 on a mainline kernel: RCCL's "hipIpcGetMemHandle failed : invalid argument" is a
  known upstream bug.

Real logs, URLs in their sidecars; the variants are cut from them."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of, lines_of

from ddpdoctor.core.next_step import Action, decide
from ddpdoctor.diagnose import scan_stream
from ddpdoctor.diagnose.events import EventKind as K

DIR = Path("tests/fixtures/reallogs")
RETRIED = DIR / "X65_healthy_mp_spawn_4gpu_socket_warning_trains.log"
PBS = DIR / "X63_litgpt_pbs_mem_exceeded_rank0_sigkill_after_training.log"
PLOT = DIR / "X63_torchrun_training_completes_posthoc_plot_import_error.log"
ROCM = DIR / "X66_rocm_rccl_hipipc_invalid_argument_mainline_kernel_ddp_init.log"
CONNECT_AT_END = DIR / "b_store_connect_errno110_bad_master_addr.log"


def test_a_retried_connect_the_job_printed_on_after_is_a_warning():
    found = findings_of(RETRIED)
    assert [f for f in found if f.severity == "error"] == []
    assert (found[0].id, found[0].severity) == ("ENV_RENDEZVOUS_UNREACHABLE", "warning")
    assert "logged as a warning" in found[0].title


def test_the_same_warning_at_the_logs_end_stays_an_error(tmp_path):
    assert findings_in(tmp_path, lines_of(RETRIED, 1, 4))[0].severity == "error"
    lead = findings_of(CONNECT_AT_END)[0]  # a failed job's log that ends at the warning
    assert (lead.id, lead.severity) == ("ENV_RENDEZVOUS_UNREACHABLE", "error")


def test_the_batch_systems_memory_limit_is_oom_of_the_rank_mpirun_lost():
    found = findings_of(PBS)
    assert (found[0].id, found[0].ranks, found[0].severity) == ("OOM", [0], "error")
    assert "memory limit" in found[0].title
    assert decide(found).action is Action.FIX_CONFIG


def test_duplicate_gpus_of_a_start_up_probe_the_job_trained_past_are_a_warning(tmp_path):
    dup = [f for f in findings_of(PBS) if f.id == "GPU_DEVICE_MAPPING"]
    assert [f.severity for f in dup] == ["warning"]
    before_training = findings_in(tmp_path, lines_of(PBS, 1, 200))
    assert (before_training[0].id, before_training[0].severity) == ("GPU_DEVICE_MAPPING",
                                                                    "error")


def test_a_trainers_own_progress_lines_are_losses():
    with PBS.open("rb") as f:
        litgpt = [e for e in scan_stream(f, "x")[0] if e.kind is K.LOSS_VALUE]
    assert [e.data["value"] for e in litgpt][:2] == [1.429, 1.417]
    with PLOT.open("rb") as f:
        amip = [e for e in scan_stream(f, "x")[0] if e.kind is K.LOSS_VALUE]
    assert amip == []  # a bare "loss=" is no needle: it is on every line of an ordinary log


def test_a_package_the_environment_lacks_is_fixed_in_the_environment():
    found = findings_of(PLOT)
    assert found[0].id == "RANK_CRASHED" and "matplotlib" in found[0].title
    assert decide(found).action is Action.FIX_CONFIG


def test_rocm_62_ipc_on_a_mainline_kernel_is_a_known_bug():
    lead = findings_of(ROCM)[0]
    assert lead.id == "KNOWN_UPSTREAM_BUG" and "ROCm 6.2" in lead.title
