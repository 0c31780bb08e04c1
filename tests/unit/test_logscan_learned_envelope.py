"""An envelope no one named, learned from the log (diagnose/envelope.py): journald, docker
compose and SageMaker's local mode, `kubectl logs --prefix`, a web viewer's line numbers put
their own mark before every line; the reader takes it off where the log's own shape says
it is one, and nowhere else.

Real logs: SageMaker local mode's compose prefix (F1_mpirun_local_rank_wrong_mmdet,
open-mmlab/mmdetection#8940), a viewer's line numbers (F4_llamafactory_watchdog_flight_
recorder_timeout, hiyouga/LlamaFactory#8261). The probe (tools.probe, styles journald,
compose, kubeprefix) put the development set in each format: one log in six read right
read differently before; these hold the lesson."""

from __future__ import annotations

from pathlib import Path

import pytest
from logscan_helpers import findings_in, findings_of

from ddpdoctor.diagnose import envelope
from ddpdoctor.diagnose.reader import ReadStats, _envelope
from tools import probe

DIR = Path("tests/fixtures/reallogs")
# tools/probe.py: the formats, their sources; "ts", "viewer" and "clock" end in a time and a
# blank, no separator (moreutils' ts, a log viewer's time column, a clock alone)
STYLES = ("journald", "compose", "kubeprefix", "ts", "viewer", "clock")


def _learned(path: Path) -> str | None:
    found = _envelope(path.read_bytes()[:256 * 1024], ReadStats(path.name))
    return found.example if found is not None else None


def _lead(found) -> tuple[str, list[int]]:
    errors = [f for f in found if f.severity == "error"]
    return (errors[0].id, errors[0].ranks) if errors else ("NONE", [])


def test_four_lines_behind_a_compose_prefix_are_too_few_to_tell():
    # SageMaker local mode's "gsb2fnng0z-algo-1-6pcq6 |" on mpirun's 4-line report: one
    # empty line behind it is all the proof, and one is what a logger's empty record gives
    assert _learned(DIR / "F1_mpirun_local_rank_wrong_mmdet.log") is None


def test_slurms_own_error_lines_are_no_envelope(tmp_path):
    # "slurmstepd: error: ..." and "srun: error: nid006024: task 0: Out Of Memory" (real
    # lines 7-12 of X90_...) share a shape of words alone; the host label after it is
    # Slurm's own. Learned, the OOM read as healthy (review, 2026-11-29).
    text = "".join(ln for ln in (DIR / "X90_fsdp_4node_host_oom_killed_saving_full_state_dict"
                                 ".log").read_text().splitlines(keepends=True)[6:12]
                   if "Terminating" not in ln)
    lead = findings_in(tmp_path, text)[0]
    assert (lead.id, lead.ranks) == ("OOM", [0])


def test_a_viewers_line_numbers_are_an_envelope():
    assert _learned(DIR / "F4_llamafactory_watchdog_flight_recorder_timeout.log") == "[1824] "


@pytest.mark.parametrize("name", [
    # torchtitan's logger: "[titan] 2026-02-24 ... - root - INFO - step: ..."
    "H1_healthy_torchtitan_moe_gate_fp32_all_ranks_steps",
    # progress lines that are most of the log, all alike
    "XB9_dino_16gpu_healthy_progress",
    "J1_dinov2_koleo_loss_inf_total_loss_inf",
    "J1_megatron_deepspeed_grad_norm_nan_lm_loss_missing",
    "J1_healthy_k8s_eks_mpijob_mnist_training_progress",
    # Ray's prefix, which the reader knows: nothing to learn
    "X52_healthy_verl_8gpu_grpo_agent_loop_caught_action_parse_tracebacks",
    # every line a rank's: "[rank0]:[rank0]: ..."
    "G1_rank0_importerror_torch_nightly_too_old_torchtitan",
])
def test_a_loggers_format_or_a_known_prefix_is_not_learned(name):
    assert _learned(DIR / f"{name}.log") is None


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("name", [
    "P1_zero3_loss_scale_at_minimum",                  # [rank1]: under the envelope
    "X68_healthy_fairseq_8gpu_c10d_socket_warn_fp16_overflow",  # stays healthy
    "X21_sharp_error_atexit_stale_handle_healthy",
    "G1_rank0_importerror_torch_nightly_too_old_torchtitan",    # [rank0]:[rank0]:
    "T1_mpi_ucx_cuda_ipc_segfault_broadcast_srun",     # srun's "0: " under it
    "X36_mpirun_two_slots_per_host_with_g2_invalid_device_ordinal",  # no traceback
    "L2_msswift_zero3_multinode_oom_rank11",
    "J1_megatron_index_files_only_first_node_local_storage",  # Ray's prefix under it
    "X15_megatron_ds_2node_rank4_index_cache_filenotfound_allreduce_timeout",
    # py-spy's dump: its threads and frames are another process's output, never a logger's
    "K1_bloom_176b_eval_hang_one_rank_in_dataloader_queue_get_others_in_broadcast_allreduce",
    # torchrun's summary alone (13 lines): its fields are ChildFailedError's message
    "N1_host_ram_sigkill_torchrun_vila_lora_2x3090ti",
    "X27_accelerate_deepspeed_prepare_tuple_all_ranks_attributeerror",
])
def test_a_real_log_reads_the_same_in_an_unnamed_envelope(tmp_path, name, style):
    path = DIR / f"{name}.log"
    text = probe.STYLES[style](path.read_text(encoding="utf-8", errors="replace"))
    assert _lead(findings_in(tmp_path, text.decode())) == _lead(findings_of(path))


def test_the_note_says_what_came_off(tmp_path):
    from ddpdoctor.diagnose import LogInput, diagnose_logs

    lines = (DIR / "P1_zero3_loss_scale_at_minimum.log").read_text().splitlines()
    log = tmp_path / "job.log"
    log.write_text("".join(f"trainer-1  | {line}\n" for line in lines))
    _, scan = diagnose_logs([LogInput(str(log))])
    notes = " ".join(n for s in scan.stats for n in s.notes)
    assert "'trainer-1  |'" in notes and "envelope" in notes


def test_a_shape_on_too_few_lines_is_not_an_envelope():
    def known(text: str) -> tuple[int | None, str]:
        return None, text

    lines = ["node-1 | Traceback (most recent call last):", "node-1 |   File \"x.py\", line 1"]
    assert envelope.sniff(lines, known) is None
    lines.append("node-1 | ValueError: x")
    found = envelope.sniff(lines, known)
    assert found is not None and found.cut(lines[1]) == len("node-1 | ")


def test_a_time_before_a_rank_prefix_on_one_line_keeps_the_rank():
    # one line cannot show an envelope's shape: the time before "[rank3]:" is read as one
    from ddpdoctor.diagnose.reader import split_rank_prefix

    said = "[E218 04:54:22.864467604 ProcessGroupNCCL.cpp:616] x"
    for time in (" 2025-02-18 12:54 ", "Dec 06 17:37:24 ", "07:05:16 ", "[2024-05-01 12:00:01] "):
        assert split_rank_prefix(f"{time}[rank3]:{said}") == (3, said)
    assert split_rank_prefix(f"epoch 3 [rank3]:{said}")[0] is None


def test_a_logger_that_prefixes_records_only_is_not_an_envelope():
    def known(text: str) -> tuple[int | None, str]:
        return None, text

    # every line a record of one format, the message after it never a traceback's line
    lines = [f"2024-05-01 12:00:{i:02d},123 - trainer - INFO - step {i} loss 0.{i}"
             for i in range(30)]
    lines.append("2024-05-01 12:00:31,123 - trainer - ERROR - ValueError: bad batch")
    assert envelope.sniff(lines, known) is None
    # a format of a time and a blank, no separator: a logger's still (records only)
    lines = [f"2024-05-01 12:00:{i:02d} step {i} loss 0.{i}" for i in range(30)]
    lines += ["2024-05-01 12:00:31 Traceback (most recent call last):",
              '  File "train.py", line 3, in <module>', "ValueError: bad batch"]
    assert envelope.sniff(lines, known) is None


def test_sagemakers_mpi_tag_names_the_rank(tmp_path):
    # the toolkit's re-written --tag-output: pacman100/accelerate-aws-sagemaker's README.md
    # (af5caadcea0fa8186c11a784b6f86591c8fa5b3f, lines 75-86), and the toolkit's own test
    # (aws/sagemaker-training-toolkit 3383937, test/unit/test_process.py, lines 114-124)
    from ddpdoctor.diagnose.reader import split_rank_prefix

    said = "INFO:root:Reducer buckets have been rebuilt in this iteration."
    assert split_rank_prefix(f"[1,mpirank:3,algo-1]<stderr>:{said}") == (3, said)
    lead = findings_in(tmp_path, "[1,mpirank:0,algo-1]<stderr>:FileNotFoundError: [Errno 2] "
                       "No such file or directory\n")[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [0])
