"""A log hard-wrapped at a terminal's width (diagnose/hardwrap.py) is read as the lines the
job printed; one that is not is read as it is.

Real wrapped logs are in the corpus (pasted from a terminal whose copy cut each line:
F4_openr1_grpo_broadcast_seq4_watchdog_timeout.log's `OpTy` / `pe=BROADCAST`,
X88_torchtune_end_of_epoch_save_keyerror_allgather_timeout.log's `Timeo` / `ut(ms)=`). The
probe (tools.probe, styles wrap80 and wrap120) re-wraps every log read right; the logs
below are those it found read differently before the join (2026-11-28)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from logscan_helpers import findings_in, findings_of

from ddpdoctor.diagnose import hardwrap
from ddpdoctor.diagnose.reader import ReadStats, iter_picked
from tools.probe import hard_wrap

DIR = Path("tests/fixtures/reallogs")
# the corpus's logs that are hard-wrapped as collected (each read by eye), with the width.
# Not J1_healthy_llamafactory_zero3_invalidate_trace_cache_steps_progress: its longest
# line is a progress bar DeepSpeed's "Invalidate trace cache @ step 10" (after a digit, a
# capitalised word: a line of its own) broke off, not a terminal's cut.
WRAPPED = {
    "F4_openr1_grpo_broadcast_seq4_watchdog_timeout": 137,
    "X88_torchtune_end_of_epoch_save_keyerror_allgather_timeout": 183,
    "F4_bloom176b_throughput_drop_slow_gpu": 153,
    "H1_healthy_megatron_bridge_nsys_profile_run": 86,
    # a paste cut at one width, line by line
    "R1_ddp_unused_params_mmdet_torch11_titanx": 366,
    # an issue's excerpt wrapped at 175 ("NumelIn=18561" / "4592, NumelOut=...")
    "XG7_olmo2_fsdp_allgather_timeout_mid_training": 175,
    # a tmux pane's capture, cut at the pane's 178 columns
    "XG9_detectron2_devit_4gpu_spawn_eval_oom_rank1": 178,
}


def _head(path: Path) -> bytes:
    with path.open("rb") as f:
        return f.read(hardwrap.SNIFF_BYTES)


def test_the_wrapped_logs_of_the_corpus_and_no_other_are_told_wrapped():
    told = {p.stem: w for p in sorted(DIR.glob("*.log")) if (w := hardwrap.sniff(_head(p)))}
    assert told == WRAPPED


def _lead(found) -> tuple[str, list[int]]:
    errors = [f for f in found if f.severity == "error"]
    return (errors[0].id, errors[0].ranks) if errors else ("NONE", [])


@pytest.mark.parametrize("name,width", [
    ("F1_deepspeed_offload_host_oom_killed", 80),
    ("F1_fp16_loss_scale_stuck_at_1_gpt2_deepspeed", 80),
    ("F4_spa_vl_rlhf_reward_broadcast_shape_mismatch", 80),
    ("G1_nccl_graph_file_from_image_dev_not_found_azure_a100", 80),
    ("H1_ib_mlx5_completion_error_weight_sync_openrlhf", 80),
    ("L1_mp_spawn_sigkill_loguru_acumen", 80),
    ("L1_mp_spawn_sigsegv_process0_mpsenet", 80),
    ("a_known_bug_torchrun_c10d_py312_segfault", 80),
    ("a_nccl_mismatched_collective_rank39", 80),
    ("J1_megatron_index_files_only_first_node_local_storage", 120),
    ("F3_healthy_find_unused_warning_wav2vec_speechbrain", 120),
    ("F5_horovod_mpirun_duplicate_gpu", 120),
    ("L2_lightning_rank_zero_only_log_checkpoint_collective_mismatch", 120),
    ("U1_healthy_user_ctrl_c_megatron_ds_8gpu_keyboardinterrupt", 120),
    ("X25_healthy_ds_2node_gcp_a3_nccl_shim_warn_fp16_overflow", 120),
])
def test_a_real_log_reads_the_samehard_wrapped(tmp_path, name, width):
    path = DIR / f"{name}.log"
    text = path.read_text(encoding="utf-8", errors="replace")
    wrapped = hard_wrap(text, width).decode()
    assert hardwrap.sniff(wrapped.encode()[:hardwrap.SNIFF_BYTES]) == width
    assert _lead(findings_in(tmp_path, wrapped)) == _lead(findings_of(path))


def _joined(data: bytes, width: int, piece: int = 1 << 16) -> bytes:
    stream = hardwrap.HardWrapped(b"", io.BytesIO(data), width)
    out = b""
    while chunk := stream.read(piece):
        out += chunk
    return out


@pytest.mark.parametrize("piece", [7, 1 << 16])
def test_pieces_are_joined_whatever_the_read_size(piece):
    text = (DIR / "X88_torchtune_end_of_epoch_save_keyerror_allgather_timeout.log").read_bytes()
    once = _joined(text, 183)
    assert _joined(text, 183, piece) == once
    # the NCCL line the copy cut in two is one line again
    assert b"Timeout(ms)=600000) ran for 600055 milliseconds" in once
    assert len(once.splitlines()) < len(text.splitlines())


def test_what_starts_a_record_or_a_row_like_it_is_never_joined():
    width = 12
    rows = b"step 10 loss\nstep 11 loss\n[rank0]: err\nTraceback (m\n"
    assert _joined(rows, width) == rows


def test_a_quoted_line_keeps_the_input_files_line_number():
    path = DIR / "X88_torchtune_end_of_epoch_save_keyerror_allgather_timeout.log"
    lines = path.read_bytes().splitlines()
    picked = list(iter_picked(io.BytesIO(path.read_bytes()), (b"Watchdog caught",),
                              ReadStats(name="x")))
    assert picked and all(lines[p.lineno - 1] in p.text.encode() for p in picked)
    assert len({p.lineno for p in picked}) == len(picked) > 1


def test_the_check_line_says_the_log_was_read_joined():
    stats = ReadStats(name="x")
    path = DIR / "F4_openr1_grpo_broadcast_seq4_watchdog_timeout.log"
    list(iter_picked(io.BytesIO(path.read_bytes()), (b"Watchdog",), stats))
    assert any("hard-wrapped at 137 columns" in n for n in stats.notes), stats.notes
    assert stats.lines == len(path.read_bytes().splitlines())


def test_a_piece_cut_before_a_bracket_is_joined(tmp_path):
    # "(SeqNum=" is NCCL's own text, not a record's prefix: cut just before it the watchdog
    # line is one line again and its collective and sequence number are read
    path = DIR / "F1_timeout_rank0_evaluating_ufld.log"
    text = path.read_text()
    width = text.index("(SeqNum=") - text.index("[E ProcessGroupNCCL.cpp:821] [Rank 3]")
    wrapped = hard_wrap(text, width).decode()
    assert "WorkNCCL\n(SeqNum=4178" in wrapped
    assert hardwrap.sniff(wrapped.encode()) == width
    found = findings_in(tmp_path, wrapped)
    assert _lead(found) == ("HANG_RANK_MISSING_COLLECTIVE", [0])
    assert "ALLREDUCE #4178" in found[0].title


# fixed-width rows, each followed by a line of another kind (a loss log's step rows and
# its evaluation line; Keras's epoch lines): the longest lines all have one width, but
# what follows each starts a word of its own. A review found this read as wrapped at 72
# and the last line, "Killed" (what a shell prints for a SIGKILL), glued to the last row.
_ROWS = "".join(f"step {i:06d} | loss 0.{i % 9}234 | lr 0.000{i % 7}00 | grad_norm 0.{i % 5}"
                f"234 | tok/s 1{i % 8}345\nEvaluating on validation set ({100 + i % 50} "
                f"batches)\n" for i in range(1, 300))


def test_rows_followed_by_lines_of_another_kind_are_not_a_wrap(tmp_path):
    text = _ROWS + "step 000300 | loss 0.1234 | lr 0.000100 | grad_norm 0.1234 | tok/s " \
        "12345\nKilled\n"
    assert len({len(line) for line in text.splitlines()[::2]}) == 1
    assert hardwrap.sniff(text.encode()) == 0
    found = findings_in(tmp_path, text)
    assert _lead(found) == ("OOM", [])
    assert found[0].evidence["first_seen"].endswith(f":{text.count(chr(10))}")


def test_a_death_or_an_exception_is_never_glued_to_a_full_line():
    width = 20
    full = b"x" * 14 + b"abcdef"  # a piece that fills the width, cut inside a word
    for line in (b"Killed", b"Segmentation fault (core dumped)",
                 b"torch.distributed.DistBackendError: NCCL error", b"KeyError: 'x'"):
        assert _joined(full + b"\n" + line + b"\n", width) == full + b"\n" + line + b"\n"
    assert _joined(full + b"\nghij\n", width) == full + b"ghij\n"


def test_a_piece_is_compared_with_the_lines_first_piece_not_the_last():
    # a long tensor print cut into pieces that each start "00, " is one line
    line = "tensor([" + ", ".join(["0.0000"] * 12) + "])"
    wrapped = hard_wrap(line, 24)
    assert len(wrapped.splitlines()) > 3
    assert _joined(wrapped, 24) == line.encode() + b"\n"


def test_the_bytes_read_are_the_inputs_not_the_joined_streams():
    path = DIR / "X88_torchtune_end_of_epoch_save_keyerror_allgather_timeout.log"
    data = path.read_bytes().replace(b"\n", b"\r\n")
    stats = ReadStats(name="x")
    list(iter_picked(io.BytesIO(data), (b"Watchdog",), stats))
    assert any("hard-wrapped" in n for n in stats.notes), stats.notes
    assert stats.bytes_read == len(data)
