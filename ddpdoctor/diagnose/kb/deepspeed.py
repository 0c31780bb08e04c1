"""DeepSpeed's own texts: its launcher reporting a rank's death, and its config refusals.

The launcher (``deepspeed`` -> ``deepspeed.launcher.launch``) polls its ranks once a second;
when one exits non-zero it logs ``Killing subprocess PID`` for every rank, then
``[CMD] exits with return code = N`` and exits with N. CMD there is *not* the failed rank's
command: it is the loop variable left over from spawning, the command of the last local
rank (launch.py, ``logger.error(f"{cmd} exits with return code = ...")``; recorded here:
rank 0 SIGKILLed, the line names ``--local_rank=1``). So the line's ``--local_rank`` names
the rank only when it is 0 (then the launcher spawned one process: that one failed); for
any other value the rank is unknown from the log (``ddpdoctor run`` names it by which rank
process went away first).
"""

from __future__ import annotations

import re

from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.kb.signature import Example, Signature, launcher_exit

_DS = "https://github.com/deepspeedai/DeepSpeed/issues/"
_REC = "tests/fixtures/deepspeed/"  # recorded from real deepspeed 0.19.8, 2 CPU ranks, gloo


def _exit(m: re.Match[str]) -> dict[str, object]:
    out = launcher_exit("deepspeed", int(m["exit_code"]))
    if m["local_rank"] == "0":
        # only local rank 0 spawned: the command named is the one that failed. "process"
        # is the field the scanner reads as the rank a launcher's line names (mp.spawn's).
        out["process"] = 0
    return out


SIGNATURES = (
    Signature(
        # ZeRO-3's cross-rank check (runtime/zero/utils.py, assert_lst_len_same_as_other_ranks):
        # the ranks traced different module/parameter sequences, so they would gather
        # different parameters: a collective mismatch caught before it hangs (MoE routing,
        # a branch taken on some ranks)
        "deepspeed.list_length_disagreement", K.MISMATCH_DETAIL,
        "Detected a disagreement on list length",
        r"Detected a disagreement on list length between rank(?P<rank_a>\d+) and "
        r"rank(?P<rank_b>\d+)",
        "HANG_COLLECTIVE_MISMATCH", "deepspeed ZeRO-3 (0.10 and later)",
        (Example("[rank7]: RuntimeError: Detected a disagreement on list length between rank0 "
                 "and rank7: ", "https://github.com/hiyouga/LlamaFactory/issues/10224",
                 {"rank_a": 0, "rank_b": 7, "disagreeing": [0, 7]}),),
        convert={"rank_a": int, "rank_b": int},
        extra=lambda m: {"disagreeing": sorted({int(m["rank_a"]), int(m["rank_b"])}),
                         "check": "ZeRO-3's parameter-trace length check"}),
    Signature(
        # runtime/utils.py see_memory_usage, printed around engine and ZeRO set-up: the
        # host's memory as psutil.virtual_memory() saw it
        "deepspeed.host_memory", K.HOST_MEMORY, "CPU Virtual Memory",
        r"CPU Virtual Memory:\s+used = (?P<used_gb>[\d.]+) GB, percent = (?P<percent>[\d.]+)%",
        "OOM", "deepspeed (all)",
        (Example("[2024-01-22 16:50:44,316] [INFO] [utils.py:799:see_memory_usage] CPU Virtual "
                 "Memory: used = 26.4 GB, percent = 84.6%",
                 "https://github.com/deepspeedai/DeepSpeed/issues/4571",
                 {"used_gb": 26.4, "percent": 84.6}),),
        convert={"used_gb": float, "percent": float}),
    Signature(
        "deepspeed.launcher_exit", K.PROCESS_EXIT, "exits with return code",
        r"\[(?P<command>.*?'--local_rank=(?P<local_rank>\d+)'.*?|.*?)\] exits with return "
        r"code = (?P<exit_code>-?\d+)",
        "RANK_CRASHED", "deepspeed.launcher.launch, 0.3 to 0.19",
        (Example("[2023-07-10 04:26:35,999] [ERROR] [launch.py:324:sigkill_handler] ['/global/D1"
                 "/homes/sushant/sushanta/venv/bin/python3.10', '-u', 'trainCLM.py', "
                 "'--local_rank=1', '--deepspeed', '/home/sushant/D1/sushanta/try/nepaligpt/clm"
                 "/config/deepspeed_config.json'] exits with return code = -11",
                 "https://github.com/deepspeedai/DeepSpeedExamples/issues/626",
                 {"exit_code": -11, "signal": "SIGSEGV"}),
         Example("[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] "
                 "['/usr/bin/python3', '-u', 'main.py', '--local_rank=0', '--zero_stage', '2', "
                 "'--deepspeed'] exits with return code = -9", _DS + "3232",
                 {"exit_code": -9, "signal": "SIGKILL", "process": 0}),
         Example("[2026-11-26 21:33:08,010] [ERROR] [launch.py:259:sigkill_handler] "
                 "['/venv/bin/python3', '-u', 'ds_train.py', '--local_rank=1', '--fault', "
                 "'sigkill', '--fault-rank', '0'] exits with return code = -9",
                 _REC + "sigkill_first_of_two.log", {"exit_code": -9, "signal": "SIGKILL"})),
        convert={"exit_code": int, "local_rank": int}, extra=_exit),
    Signature(
        "deepspeed.launch_layout", K.LAUNCH_LAYOUT, "num_local_procs=",
        r"nnodes=(?P<nnodes>\d+), num_local_procs=(?P<num_local_procs>\d+), "
        r"node_rank=(?P<node_rank>\d+)",
        "RANK_CRASHED", "deepspeed.launcher.launch, 0.3 to 0.19",
        (Example("[2024-10-14 00:16:58,329] [INFO] [launch.py:152:main] nnodes=2, "
                 "num_local_procs=1, node_rank=1",
                 "https://github.com/ZhiyiHu1999/DistributedSysLab_FS24/blob/8147f54d56c7c71"
                 "292fc5338da4d070fcfa2f1a2/deepspeed_example/deepspeed_example.526821.o",
                 {"nnodes": 2, "num_local_procs": 1, "node_rank": 1}),),
        convert={"nnodes": int, "num_local_procs": int, "node_rank": int}),
    Signature(
        "deepspeed.killing_subprocess", K.TEARDOWN, "Killing subprocess",
        r"sigkill_handler\] Killing subprocess (?P<pid>\d+)", "RANK_CRASHED",
        "deepspeed.launcher.launch, 0.3 to 0.19",
        (Example("[2021-11-21 08:32:07,148] [INFO] [launch.py:131:sigkill_handler] Killing "
                 "subprocess 250621", _DS + "1581", {"pid": 250621}),
         Example("[2026-11-26 21:33:07,983] [INFO] [launch.py:253:sigkill_handler] Killing "
                 "subprocess 10843", _REC + "sigkill_first_of_two.log", {"pid": 10843})),
        convert={"pid": int}),
    Signature(
        "deepspeed.config_batch", K.DS_CONFIG, "Check batch related parameters",
        r"train_batch_size is not\s+equal to micro_batch_per_gpu \* gradient_acc_step \* "
        r"world_size\s*(?P<train_batch_size>\d+) != (?P<micro_batch>\d+) \* (?P<grad_acc>\d+) "
        r"\* (?P<world_size>\d+)", "DS_CONFIG_INVALID", "deepspeed >= 0.3 (runtime/config.py)",
        (Example("[rank0]: AssertionError: Check batch related parameters. train_batch_size is "
                 "not equal to micro_batch_per_gpu * gradient_acc_step * world_size 8 != 2 * 1 "
                 "* 1", _DS + "6914", {"train_batch_size": 8, "micro_batch": 2, "grad_acc": 1,
                                       "world_size": 1}),
         Example("AssertionError: Check batch related parameters. train_batch_size is not equal "
                 "to micro_batch_per_gpu * gradient_acc_step * world_size 256 != 2 * 18 * 7",
                 "https://github.com/OpenRLHF/OpenRLHF/issues/346",
                 {"train_batch_size": 256, "grad_acc": 18, "world_size": 7})),
        convert={"train_batch_size": int, "micro_batch": int, "grad_acc": int,
                 "world_size": int},
        extra=lambda m: {"setting": "train_batch_size"}),
    Signature(
        "deepspeed.config_fp16_bf16", K.DS_CONFIG, "cannot be simultaneously enabled",
        r"bfloat16 and fp16 modes cannot be simultaneously enabled", "DS_CONFIG_INVALID",
        "deepspeed >= 0.5 (runtime/config.py)",
        (Example("- `DeepSpeedWorker.ds_training_config` no longer `setdefault`s `bf16` when the "
                 "client already enabled `fp16`. Both at once is a DeepSpeed assert (`bfloat16 "
                 "and fp16 modes cannot be simultaneously enabled`).",
                 "https://github.com/Snowflake-AI-Research/Arctic-Platform/pull/78"),),
        extra=lambda m: {"setting": "fp16.enabled, bf16.enabled"}),
)
