"""A line's envelope: what a log collector or a remote shell puts in front of every line it
passes on (no rank in it) is taken off before the line is read, so the same job's log
reads the same through `kubectl logs --timestamps`, a Ray/Beaker export or DeepSpeed's
pdsh launcher.

The formats are real: pdsh's host label as DeepSpeed's multi-node launcher prints it
(c_deepspeed_pdsh_master_addr_wrong_nic_no_route.log, huggingface/accelerate#2468;
X32_healthy_deepspeed_128rank_16node_fp16_overflow_skips_finished.log), an RFC 3339
collector time (F2_healthy_barrier_device_unknown_warning_open_instruct.log,
allenai/open-instruct#1055). A probe that wrapped every development-set log so found a
finished run called failed and failed runs called healthy; these hold the lesson."""

from __future__ import annotations

from pathlib import Path

import pytest
from logscan_helpers import findings_in, findings_of

from ddpdoctor.diagnose.reader import split_rank_prefix, strip_envelope

DIR = Path("tests/fixtures/reallogs")


@pytest.mark.parametrize("line,body", [
    ("trainer-2:   File \"/usr/lib/python3.10/rendezvous.py\", line 246, in _env_rendezvous",
     "  File \"/usr/lib/python3.10/rendezvous.py\", line 246, in _env_rendezvous"),
    ("ml-512-node-001: [2024-07-08 06:00:42,318] [INFO] [real_accelerator.py:203:get_acc",
     "[2024-07-08 06:00:42,318] [INFO] [real_accelerator.py:203:get_acc"),
    ("10.0.0.2: [rank8]: RuntimeError: x", "[rank8]: RuntimeError: x"),
    ("2025-10-03T20:49:10.479Z (PolicyTrainerRayProcess pid=1720) [rank0]:[W1003 x",
     "(PolicyTrainerRayProcess pid=1720) [rank0]:[W1003 x"),
    ("2024-05-01T12:00:01.123456789Z stderr F   rank      : 2 (local_rank: 2)",
     "  rank      : 2 (local_rank: 2)"),
    ("2024-05-01T12:00:01+02:00 worker-1:  3: [rank3]: x", " 3: [rank3]: x"),
])
def test_a_collectors_time_and_a_remote_shells_host_come_off(line, body):
    assert strip_envelope(line) == body


@pytest.mark.parametrize("line,body", [
    # a Markdown / e-mail quote, nested or not, outside any other envelope
    (">   File \"train.py\", line 412, in <module>", "  File \"train.py\", line 412, in <module>"),
    ("> > [rank1]: ValueError: x", "[rank1]: ValueError: x"),
    (">RuntimeError: x", "RuntimeError: x"), (">", ""),
    ("> 2024-05-01T12:00:01Z worker-1: [rank3]: x", "[rank3]: x"),
])
def test_a_quote_comes_off(line, body):
    assert strip_envelope(line) == body


def test_a_log_quoted_whole_in_its_thread_reads_as_its_lines(tmp_path):
    """ultralytics/yolov3#1151 posted its traceback inside a block quote, every line."""
    path = DIR / "b_dataloader_bus_error_yolov3_system_ram.log"
    quoted = path.read_text(encoding="utf-8").splitlines()
    assert all(line.startswith("> ") for line in quoted)
    unquoted = "".join(line[2:] + "\n" for line in quoted)
    assert _lead(findings_of(path)) == _lead(findings_in(tmp_path, unquoted))
    assert _lead(findings_of(path))[0] != "NONE"


@pytest.mark.parametrize("line", [
    "train.py: error: unrecognized arguments: true",  # argparse names the program
    "EI0002: [PID: 7277] 2024-11-28-11:59:30.645.648 The wait execution ...",  # an error code
    "rank1: loss 2.3", "step100: loss 2.3", "0: [rank0]: ValueError: x",  # rank-bearing
    "RuntimeError: Caught RuntimeError in DataLoader worker process 0.",
    "ready-to-go: x",  # no digit: a word, not a host
    "[2024-07-08 06:00:42,318] [INFO] [launch.py:162:main] WORLD INFO DICT",  # the library's
])
def test_what_is_the_line_itself_stays(line):
    assert strip_envelope(line) == line


def test_the_rank_prefix_under_an_envelope_is_still_read():
    body = strip_envelope("worker-1: [rank8]: ValueError: x")
    assert split_rank_prefix(body) == (8, "ValueError: x")


def _wrapped(path: Path, style: str) -> str:
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    if style == "kubectl":
        return "".join(f"2024-05-01T12:00:{i % 60:02d}.123456789Z {line}\n"
                       for i, line in enumerate(lines))
    if style == "quote":
        return "".join(f"> {line}\n" for line in lines)
    return "".join(f"node-01: {line}\n" for line in lines)


def _lead(found) -> tuple[str, list[int]]:
    errors = [f for f in found if f.severity == "error"]
    return (errors[0].id, errors[0].ranks) if errors else ("NONE", [])


@pytest.mark.parametrize("style", ["kubectl", "pdsh", "quote"])
@pytest.mark.parametrize("name", [
    # torchrun's failure summary (indented fields) names the ranks
    "X23_torchrun_rank0_early_stop_break_allreduce_timeout",
    # a finished run whose compiler logged tracebacks in warning records
    "X49_healthy_megatron_56rank_inductor_cache_tracebacks_clean_data_exhaustion_exit",
    # failed runs a collector's time had made read as healthy
    "F1_fsdp_mixed_dtype_flatten_qlora_llamafactory",
    "X78_torchtitan_llama4_ep_without_tp_mesh_unavailable",
    "X63_torchrun_training_completes_posthoc_plot_import_error",
    "X97_syntax_error_all_ranks_torchrun",
    "X37_mpspawn_notebook_fn_not_picklable_4ranks",
    # py-spy dumps, read again for their stacks
    "F4_bloom176b_eval_hang_dataloader_deadlock",
    # a quote made these read differently (the probe's "quote" style, 2026-11-28)
    "X68_healthy_fairseq_8gpu_c10d_socket_warn_fp16_overflow",
    "c_healthy_visdom_own_traceback_cyclegan",
    "X84_qlora_ddp_4rank_cuda_oom_a100_40gb_batch8",
    "a_known_bug_nccl2185_invalid_argument_wsl_3090ti",
    "G2_nccl_net_plugin_on_some_nodes_only_hang",
    "J1_megatron_index_files_only_first_node_local_storage",
])
def test_a_real_log_reads_the_same_inside_an_envelope(tmp_path, name, style):
    path = DIR / f"{name}.log"
    assert _lead(findings_in(tmp_path, _wrapped(path, style))) == _lead(findings_of(path))
