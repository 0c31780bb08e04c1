"""Known texts of a process dying: DataLoader workers, memory, NaN guards, signals, the GPU."""

from __future__ import annotations

import re

from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.kb.signature import Example, Signature, ints, launcher_exit

FIX = "tests/fixtures/logs/"
_SIZE = r"[\d.]+ ?(?:[KMGT]i?B|bytes|B)"


_UNIT = {"B": 1, "bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
         "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


def size_bytes(text: str) -> int | None:
    """``"19.88 GiB"`` -> bytes, as PyTorch's caching allocator prints sizes."""
    m = re.fullmatch(r"([\d.]+) ?(\w+)", text.strip())
    if m is None or m[2] not in _UNIT:
        return None
    try:
        return int(float(m[1]) * _UNIT[m[2]])
    except ValueError:
        return None


def _gpu(m: re.Match[str]) -> dict[str, object]:
    gpu = m["gpu"] or m["gpu_old"]
    out: dict[str, object] = {"gpu": int(gpu)} if gpu else {}
    # each other process on the GPU and what it holds: who took the memory (rules_training)
    held = [size_bytes(x) for x in re.findall(r"Process \d+ has ([\d.]+ \w+) memory in use",
                                              m.string)]
    if held:
        out["other_processes"] = len(held)
        out["others_bytes"] = [b for b in held if b is not None]
    if m["in_use"] and (mine := size_bytes(m["in_use"])) is not None:
        out["in_use_bytes"] = mine
        total, free = size_bytes(m["total_capacity"] or ""), size_bytes(m["free"] or "")
        if total is not None and free is not None:
            # what neither this process nor a listed one holds: processes the message
            # cannot name (another container's, a previous run's leftovers)
            out["unlisted_bytes"] = max(0, total - free - mine - sum(b for b in held if b))
    return out


def _launcher_exit(m: re.Match[str]) -> dict[str, object]:
    return launcher_exit("composer", int(m["exit_code"]))


# the child command torch.distributed.launch (torch < 1.9) started: its --local_rank says
# which process of the node's it was
_LOCAL_RANK_ARG = re.compile(r"'--local[_-]rank=(?P<local_rank>\d+)'")


def _legacy_launch_exit(m: re.Match[str]) -> dict[str, object]:
    """The legacy launcher's CalledProcessError for one of its children: the launcher's
    report of which process died, as torchrun's agent line is. Every other command that
    failed (ssh, a build) is no launcher's report."""
    code = int(m["exit_code"]) if m["exit_code"] is not None else -int(m["signum"])
    local = _LOCAL_RANK_ARG.search(m["command"])
    if local is None:
        return {"exit_code": code}
    return {**launcher_exit("torch.distributed.launch", code), "exit_code": code,
            "local_rank": int(local["local_rank"])}


def _mpirun_exit(m: re.Match[str]) -> dict[str, object]:
    return launcher_exit("mpirun", int(m["exit_code"]))


def _lightning_exit(m: re.Match[str]) -> dict[str, object]:
    return launcher_exit("lightning", int(m["exit_code"]))


def _mm_loss(m: re.Match[str]) -> dict[str, object]:
    """OpenMMLab's and any trainer's progress line in the fields Megatron's gives (the
    divergence rule reads ``value`` and ``iteration``)."""
    out: dict[str, object] = {}
    for key in ("mm_value", "any_value", "bracket_value", "ml_value"):
        if m[key] is not None:
            out["value"] = float(m[key])
    for key in ("iter", "bracket_iter", "ml_iter"):
        if m[key] is not None:
            out["iteration"] = int(m[key])
    return out


SIGNATURES = (
    Signature(
        "dataloader.killed_by_signal", K.DL_KILLED, "is killed by signal",
        r"DataLoader worker \(pid (?P<pid>\d+)\) is killed by signal: (?P<signal>[^.]+)\.",
        "DATALOADER_WORKER_FAILURE", "torch >= 0.4",
        (Example("[rank1]: RuntimeError: DataLoader worker (pid 23255) is killed by signal: Bus "
                 "error. It is possible that dataloader's workers are out of shared memory.",
                 FIX + "dataloader_bus_signal.log", {"pid": 23255, "signal": "Bus error"}),
         Example("RuntimeError: DataLoader worker (pid 624) is killed by signal: Segmentation "
                 "fault.", "https://github.com/facebookresearch/pycls/issues/146",
                 {"signal": "Segmentation fault"})),
        convert={"pid": int}),
    Signature(
        "dataloader.exit_code", K.DL_EXIT, "exited unexpectedly with exit code",
        r"DataLoader worker \(pid (?P<pid>\d+)\) exited unexpectedly with exit code "
        r"(?P<exit_code>-?\d+)",
        "DATALOADER_WORKER_FAILURE", "torch >= 0.4",
        (Example("[rank1]: RuntimeError: DataLoader worker (pid 18032) exited unexpectedly with "
                 "exit code 3.", FIX + "dataloader_exit.log", {"pid": 18032, "exit_code": 3}),),
        convert={"pid": int, "exit_code": int}),
    Signature(
        "dataloader.exited", K.DL_EXITED, "exited unexpectedly",
        r"DataLoader worker \(pid\(s\) (?P<pids>[\d, ]+)\) exited unexpectedly(?!\s*with)",
        "DATALOADER_WORKER_FAILURE", "torch >= 1.0",
        (Example("RuntimeError: DataLoader worker (pid(s) 10116, 14052) exited unexpectedly",
                 "https://github.com/makeuptransfer/SCGAN/issues/18", {"pids": [10116, 14052]}),
         Example("`RuntimeError: DataLoader worker (pid(s) 25) exited unexpectedly`",
                 "https://github.com/facebookresearch/detectron2/issues/384", {"pids": [25]})),
        convert={"pids": ints}),
    Signature(
        "dataloader.timeout", K.DL_TIMEOUT, "DataLoader timed out",
        r"DataLoader timed out after (?P<timeout_s>[\d.]+) seconds",
        "DATALOADER_WORKER_FAILURE", "torch >= 0.4",
        (Example("[rank1]: RuntimeError: DataLoader timed out after 3 seconds",
                 FIX + "dataloader_timeout.log", {"timeout_s": 3.0}),),
        convert={"timeout_s": float}),
    Signature(
        "dataloader.worker_exception", K.DL_WORKER_EXCEPTION, "in DataLoader worker process",
        r"Caught (?P<exception_type>\w+) in DataLoader worker process (?P<worker>\d+)",
        "DATALOADER_WORKER_FAILURE", "torch >= 1.2",
        (Example("[rank0]: RuntimeError: Caught RuntimeError in DataLoader worker process 0.",
                 FIX + "shm_small.log", {"exception_type": "RuntimeError", "worker": 0}),),
        convert={"worker": int}),
    Signature(
        "dataloader.worker_signal", K.DL_WORKER_SIGNAL, "encountered in worker",
        r"ERROR: Unexpected (?P<what>bus error|segmentation fault|floating-point exception) "
        r"encountered in worker",
        "DATALOADER_WORKER_FAILURE", "torch >= 0.4",
        (Example("ERROR: Unexpected bus error encountered in worker. This might be caused by "
                 "insufficient shared memory (shm).", FIX + "dataloader_bus.log",
                 {"what": "bus error"}),
         Example("ERROR: Unexpected segmentation fault encountered in worker.",
                 "https://github.com/pytorch/pytorch/issues/53894",
                 {"what": "segmentation fault"}))),
    Signature(
        "shm.torch_allocate", K.SHM_ALLOC, "shared memory",
        r"unable to allocate shared memory\(shm\) for file <(?P<file>[^>]*)>: (?P<reason>.*)",
        "ENV_SHM_TOO_SMALL", "torch >= 2.0",
        (Example("[rank0]: RuntimeError: unable to allocate shared memory(shm) for file "
                 "</torch_6751_649867173_0>: No space left on device (28)", FIX + "shm_small.log",
                 {"file": "/torch_6751_649867173_0",
                  "reason": "No space left on device (28)"}),)),
    Signature(
        "oom.cuda", K.CUDA_OOM, "CUDA out of memory",
        r"CUDA out of memory\. Tried to allocate (?P<tried_to_allocate>" + _SIZE + r")"
        r"(?:.*?GPU (?P<gpu>\d+) has a total capac(?:i)?ty of (?P<total_capacity>" + _SIZE
        + r") of which (?P<free>" + _SIZE + r") is free)?"
        r"(?:.*?this process has (?P<in_use>" + _SIZE + r") memory in use)?"
        r"(?:.*?Of the allocated memory (?P<allocated_by_pytorch>" + _SIZE + r") is allocated "
        r"by PyTorch, and (?P<reserved_unallocated>" + _SIZE + r") is reserved)?"
        r"(?:.*?\(GPU (?P<gpu_old>\d+); (?P<total_old>" + _SIZE
        + r") total capacity; (?P<allocated_old>" + _SIZE + r") already allocated; "
        r"(?P<free_old>" + _SIZE + r") free)?",
        "OOM", "torch >= 1.0 (the GPU N has a total capacity wording from 2.1)",
        (Example("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. "
                 "GPU 0 has a total capacity of 23.65 GiB of which 11.06 MiB is free. Including "
                 "non-PyTorch memory, this process has 23.60 GiB memory in use. Of the allocated "
                 "memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by "
                 "PyTorch but unallocated.", "https://github.com/pytorch/pytorch/issues/16417",
                 {"tried_to_allocate": "22.00 MiB", "gpu": 0, "total_capacity": "23.65 GiB",
                  "free": "11.06 MiB", "allocated_by_pytorch": "22.90 GiB"}),
         Example("RuntimeError: CUDA out of memory. Tried to allocate 512.00 MiB (GPU 0; 15.90 "
                 "GiB total capacity; 13.13 GiB already allocated; 415.88 MiB free; 14.80 GiB "
                 "reserved in total by PyTorch)", "https://github.com/2KangHo/vdsr_pytorch/issues/2",
                 {"gpu": 0, "total_old": "15.90 GiB", "free_old": "415.88 MiB"})),
        convert={"gpu": int, "gpu_old": int}, extra=_gpu),
    Signature(
        # NCCL's own allocation (buffers, channels) failing: its WARN is the OOM.
        "oom.nccl_cuda_failure", K.CUDA_OOM, "'out of memory'",
        r"Cuda failure (?:\d+ )?'out of memory'", "OOM", "NCCL (all releases; the code from 2.19)",
        (Example("ng30903:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out "
                 "of memory'", "https://github.com/NVIDIA/nccl/issues/1235"),
         Example("localhost: [2026-03-31 15:32:44] DGX2-1:2394670:2396491 [1] include/alloc.h:228 "
                 "NCCL WARN Cuda failure 2 'out of memory'",
                 "https://github.com/stark-sim/megatron-deepspeed-lock-clock/blob/b872e98467445c"
                 "1c039bef9c5be5fa276f3e882c/.context/dual8_tp4pp1dp2_smoke_nohup_20260331_r2.log"
                 "#L1-L2981"))),
    Signature(
        # The CUDA runtime's own code for a failed allocation (cudaErrorMemoryAllocation),
        # outside the caching allocator's message: a context created on a full GPU, a
        # barrier's buffer, an abort thrown from C++ (no Python traceback at all).
        "oom.cuda_error", K.CUDA_OOM, ("CUDA error: out of memory",
                                       "CUDA_ERROR_OUT_OF_MEMORY"),
        r"CUDA error: out of memory|CUDA_ERROR_OUT_OF_MEMORY", "OOM",
        "torch >= 1.0 (cudaErrorMemoryAllocation)",
        (Example("  what():  CUDA error: out of memory",
                 "https://github.com/rwth-i6/returnn/issues/1482"),
         Example("RuntimeError: CUDA error: out of memory",
                 "https://github.com/MIC-DKFZ/nnUNet/issues/593"))),
    Signature(
        # XLA's status for a device allocation that failed (TPU HBM or vmem, torch_xla): the
        # accelerator's out-of-memory, in the words of the runtime under torch_xla
        "oom.xla_resource_exhausted", K.CUDA_OOM, ("RESOURCE_EXHAUSTED", "Resource exhausted"),
        r"(?i:resource[ _]exhausted):.*?(?P<xla_message>(?:Attempting to (?:reserve|"
        r"allocate) \S+.*?That was not possible|Ran out of memory in memory space \w+)[^;]*)",
        "OOM", "torch_xla (XRT and PJRT runtimes)",
        (Example("2022-04-04 00:27:49.642380: E tensorflow/compiler/xla/xla_client/xla_util.cc:88]"
                 "   (1) RESOURCE_EXHAUSTED: Attempting to reserve 6.48G at the bottom of memory. "
                 "That was not possible. There are 6.78G free, 0B reserved, and 3.33G "
                 "reservable.", "https://github.com/pytorch/xla/issues/3470"),
         Example("2020-10-22 02:48:58 10.128.0.33 [3]   (1) Resource exhausted: Attempting to "
                 "allocate 180.59M. That was not possible. There are 142.58M free.; "
                 "(0x3x0_HBM1)", "https://github.com/pytorch/xla/issues/2569",
                 {"xla_message": "Attempting to allocate 180.59M. That was not possible. There "
                                 "are 142.58M free."}),
         Example("RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile "
                 "permanent error. Ran out of memory in memory space vmem. Used 32.42M of "
                 "16.00M vmem. Exceeded vmem capacity by 16.42M",
                 "https://github.com/pytorch/xla/issues/9524"))),
    Signature(
        # A native allocator giving up on host memory: C++ new (std::bad_alloc) and Rust's
        # global allocator (tokenizers, safetensors) abort the process with these.
        "oom.host_alloc_failed", K.CPU_OOM, ("std::bad_alloc", "bytes failed"),
        r"what\(\):\s+std::bad_alloc|memory allocation of (?P<tried_to_allocate_bytes>\d+) "
        r"bytes failed", "OOM", "any native extension (C++ new, Rust's allocator)",
        (Example("  what():  std::bad_alloc", "https://github.com/Haiyang-W/DSVT/issues/14"),
         Example("memory allocation of 2097152 bytes failed",
                 "https://github.com/deepspeedai/DeepSpeedExamples/issues/321",
                 {"tried_to_allocate_bytes": 2097152})),
        convert={"tried_to_allocate_bytes": int}),
    Signature(
        "oom.cpu_allocator", K.CPU_OOM, "can't allocate memory",
        r"DefaultCPUAllocator: can't allocate memory: you tried to allocate "
        r"(?P<tried_to_allocate_bytes>\d+) bytes",
        "OOM", "torch >= 1.5",
        (Example("[rank1]: RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. "
                 "DefaultCPUAllocator: can't allocate memory: you tried to allocate "
                 "101106008064 bytes. Error code 12 (Cannot allocate memory)",
                 FIX + "cpu_oom.log", {"tried_to_allocate_bytes": 101106008064}),),
        convert={"tried_to_allocate_bytes": int}),
    Signature(
        "oom.kernel_killed", K.HOST_OOM, "of memory",
        r"Out of memory: Killed process (?P<pid>\d+) \((?P<process>[^)]*)\)",
        "OOM", "Linux kernel log (dmesg)",
        (Example("[Thu Nov 20 03:11:01 2026] Out of memory: Killed process 9021 (python3) "
                 "total-vm:98765432kB", FIX + "recorded/host_oom_dmesg.txt",
                 {"pid": 9021, "process": "python3"}),),
        convert={"pid": int}),
    Signature(
        "oom.kernel_killer", K.HOST_OOM, ("oom-kill", "oom_kill"),
        r"(?:invoked oom-killer|oom-kill:|Detected \d+ oom[-_]kill event)", "OOM",
        "Linux kernel log (dmesg), slurmstepd",
        (Example("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.batch cgroup. "
                 "Some of your processes may have been killed by the cgroup out-of-memory "
                 "handler.", "https://github.com/ArjunaCluster/ArjunaUsers/issues/52"),
         Example("[Thu Nov 20 03:11:01 2026] python3 invoked oom-killer: gfp_mask=0x140cca"
                 "(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
                 FIX + "recorded/host_oom_dmesg.txt"))),
    Signature(
        # PBS Pro's memory limit: the job's processes are killed (SIGKILL) over it
        "oom.pbs_limit", K.HOST_OOM, "exceeded memory allocation",
        r"Job (?P<job>\S+) has exceeded memory allocation on node (?P<node>\S+)", "OOM",
        "PBS Pro (NCI Gadi's job epilogue)",
        (Example("Job 124452549 has exceeded memory allocation on node "
                 "gadi-gpu-v100-0109.gadi.nci.org.au",
                 "https://github.com/hpcac/2024-APAC-HPC-AI/blob/a616bab498fc3fe3cc8ab3531110d17"
                 "0489f7cfd/baseline_and_reference/gadi/llama.nodes2.GBS128.MBS32.o124452549",
                 {"job": "124452549", "node": "gadi-gpu-v100-0109.gadi.nci.org.au"}),)),
    Signature(
        "nan.anomaly_backward", K.GRAD_NAN, "returned nan values",
        r"Function '(?P<function>\w+)' returned nan values in its (?P<output>\d+)\w* output",
        "GRAD_NONFINITE", "torch >= 1.2 with detect_anomaly",
        (Example("[rank1]: RuntimeError: Function 'SqrtBackward0' returned nan values in its 0th "
                 "output.", FIX + "nan_anomaly.log", {"function": "SqrtBackward0", "output": 0}),),
        convert={"output": int}),
    Signature(
        # Megatron-core's rerun state machine on a NaN/Inf its checks caught (the grad norm
        # before the data-parallel reduction, the loss): logged as an error, the job stops
        "megatron.rerun_unexpected", K.GRAD_NAN, "Unexpected result ",
        r"Unexpected result (?P<value>nan|inf|-inf) on rank (?P<on_rank>\d+) at iteration "
        r"#(?P<iteration>\d+)", "GRAD_NONFINITE",
        "megatron-core >= 0.9 (rerun_state_machine.validate_result)",
        (Example("ERROR:megatron.core.rerun_state_machine:Unexpected result nan on rank 13 at "
                 "iteration #2 invokation #1 (message='found NaN in local grad norm for bucket "
                 "#0 in backward pass before data-parallel communication collective')",
                 "https://github.com/NVIDIA/Megatron-LM/issues/2597",
                 {"value": "nan", "on_rank": 13, "iteration": 2}),),
        convert={"on_rank": int, "iteration": int}),
    Signature(
        "nan.clip_grad_norm", K.GRAD_NONFINITE_NORM, "is non-finite",
        r"The total norm of order (?P<norm_order>[\w.-]+) for gradients from `parameters` is "
        r"non-finite", "GRAD_NONFINITE", "torch >= 1.9 with error_if_nonfinite=True",
        (Example("[rank1]: RuntimeError: The total norm of order 2.0 for gradients from "
                 "`parameters` is non-finite, so it cannot be clipped.", FIX + "nan_clip.log",
                 {"norm_order": "2.0"}),)),
    Signature(
        "nan.loss_guard", K.LOSS_NAN, ("nan", "NaN", " inf"),
        r"\b[Ll]oss (?:is|became)(?: infinite or)? (?P<value>nan|NaN|inf|infinite)\b"
        r"(?:.*?at iteration=(?P<iteration>\d+))?",
        "GRAD_NONFINITE", "detectron2, DINO/MAE/DEIT style training loops",
        (Example("FloatingPointError: Loss became infinite or NaN at iteration=27!",
                 "https://github.com/facebookresearch/detectron2/issues/508",
                 {"iteration": 27, "value": "NaN"}),
         Example("Loss is nan, stopping training",
                 "https://github.com/facebookresearch/dino/issues/97", {"value": "nan"})),
        convert={"iteration": int}),
    Signature(
        "nan.loss_value", K.LOSS_NAN, ("nan", "NaN", " inf", "(inf", "=inf"),
        r"\b(?P<loss_name>\w*loss\w*)'?\"?\s*[:=]\s*(?:tensor\()?(?P<value>nan|NaN|-?inf)\b",
        "GRAD_NONFINITE", "any training loop that prints its losses",
        (Example("loss_dict = {'loss_cls': tensor(nan, device='cuda:0', grad_fn=<DivBackward0>), "
                 "'loss_box_reg': tensor(1310.0702, device='cuda:0', grad_fn=<DivBackward0>)}",
                 "https://github.com/facebookresearch/detectron2/issues/214",
                 {"loss_name": "loss_cls", "value": "nan"}),)),
    Signature(
        # The non-finite metric family beyond losses: a gradient norm in a trainer's
        # metrics line. Megatron prints "grad norm" only for steps that were not skipped;
        # HF Trainer logs the logging step's norm, which an fp16 step the scaler skips can
        # make inf once (the rule then wants a second line, or no scaler skips).
        "nan.grad_norm_value", K.LOSS_NAN, ("nan", "NaN", " inf"),
        r"\b(?P<loss_name>grad(?:ient)?[ _-]?norm)'?\"?\s*[:=]\s*(?:tensor\()?"
        r"(?P<value>nan|NaN|-?inf)\b",
        "GRAD_NONFINITE", "HF Trainer's metrics dict, Megatron's iteration line",
        (Example("{'loss': 22276357.5138, 'grad_norm': nan, 'learning_rate': 8e-07, "
                 "'epoch': 1.0}",
                 "https://github.com/foundation-model-stack/fms-hf-tuning/pull/290",
                 {"loss_name": "grad_norm", "value": "nan"}),
         Example(" iteration     5426/  250000 | consumed samples:        43408 | learning "
                 "rate: 2.999E-04 | global batch size:     8 | loss scale: 1.0 | grad norm: "
                 "nan | actual seqlen:  2048 |",
                 "https://github.com/bigscience-workshop/Megatron-DeepSpeed/issues/396",
                 {"loss_name": "grad norm", "value": "nan"})),
        extra=lambda m: {"metric": "grad_norm"}),
    Signature(
        # A trainer's own loss, a number: the series the divergence rule reads (a loss that
        # jumps and stays up, with no NaN printed yet). Informational one line at a time.
        "metrics.loss_value", K.LOSS_VALUE,
        # (not a bare "loss=": a needle on every line of an ordinary log would make the
        # reader examine every line, docs/benchmarks.md)
        ("lm loss: ", "'loss': ", "Iter [", "Epoch [", "loss train: ", "] loss: ",
         "]  eta: ", "  loss: "),
        r"(?:iteration\s+(?P<iteration>\d+)\s*/.*?)?(?:\blm loss: |'loss': )"
        r"(?P<value>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
        # OpenMMLab's logger (mmcv): the total "loss: " after the parts' ("aux.loss_seg: ")
        r"|(?:Iter \[(?P<iter>\d+)/\d+\]|Epoch \[\d+\]\[\d+/\d+\])\s.*(?<![.\w])loss: "
        r"(?P<mm_value>\d+(?:\.\d+)?)"
        # a trainer's own progress line: a counter, then its loss ("Epoch 1 | iter 3 step
        # 3 | loss train: 1.288"), where a needle above finds it
        r"|\b(?i:iter(?:ation)?|step|epoch)\b[\s:=#\[]*\d+[^\r\n]{0,120}?(?<![.\w])"
        r"loss(?: train)?\s*[:=]\s*(?P<any_value>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
        # PyTorch's tutorial's "[epoch, batch] loss: x" (its CIFAR-10 classifier's print, and
        # the trainers that copied it: I-JEPA's "[1,     0] loss: 3.516310e-03 masks: ...")
        r"|\[\s*\d+,\s*(?P<bracket_iter>\d+)\]\s+loss:\s*"
        r"(?P<bracket_value>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
        # the MetricLogger of DeiT, MAE, DINO and their descendants: "HEADER  [i/n]  eta:
        # 0:01:02  lr: ...  loss: 3.6128 (4.1114)  ..." (the meter, then its average)
        # (not its evaluation's: "Test:  [ 0/99]", "Validate:", "[Eval]/")
        r"|^(?![^\r\n]{0,40}?(?i:test|valid|eval))[^\r\n]{0,60}?\[\s*(?P<ml_iter>\d+)/\d+\]"
        r"  eta: [^\r\n]*?(?<![.\w])loss: (?P<ml_value>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)",
        "GRAD_NONFINITE", "Megatron's iteration line, HF Trainer's metrics dict, OpenMMLab's "
        "iteration line",
        (Example("[default7]: iteration    45000/  115311 | consumed samples:     76002224 | "
                 "elapsed time per iteration (s): 111.00 | learning rate: 4.298E-05 | global "
                 "batch size:  2048 | lm loss: 2.113567E+00 | grad norm: 0.139 |",
                 "https://github.com/bigscience-workshop/bigscience/blob/master/train/"
                 "tr11-176B-ml/chronicles.md#2022-04-30-hanging-at-eval",
                 {"iteration": 45000, "value": 2.113567}),
         Example("{'loss': 22276357.5138, 'grad_norm': nan, 'learning_rate': 8e-07, "
                 "'epoch': 1.0}",
                 "https://github.com/foundation-model-stack/fms-hf-tuning/pull/290",
                 {"value": 22276357.5138}),
         Example("2022-09-24 15:05:28,102 - mmdet - INFO - Epoch [1][20/3953]     lr: "
                 "1.000e-05, eta: 2 days, 2:41:27, time: 1.283, data_time: 0.420, memory: "
                 "15217, task0.loss_heatmap: 31.7599, task0.loss_bbox: 101.8863, loss: "
                 "133.6462, grad_norm: 1067.8555",
                 "https://github.com/yinjunbo/ProposalContrast/issues/3",
                 {"value": 133.6462}),
         Example("Epoch 1 | iter 3 step 3 | loss train: 1.288, val: n/a | iter time: 80074.06"
                 " ms (step)", "https://github.com/hpcac/2024-APAC-HPC-AI/blob/a616bab498fc3fe3"
                 "cc8ab3531110d170489f7cfd/baseline_and_reference/gadi/llama.nodes2.GBS128.MBS32."
                 "o124452549", {"value": 1.288}),
         Example("INFO:root:[1,     0] loss: 3.516310e-03 masks: 43.0 35.0 [wd: 4.00e-02] [lr: "
                 "2.00e-04] [mem: 1.58e+04] (11393.9 ms)",
                 "https://github.com/lazarosgogos/ijepa/blob/c62e6a81e8909a7ad8108c67d3ec937bf7e"
                 "8edd8/slurm-1873889.out", {"value": 0.00351631}),
         Example("Training  [23370/38147]  eta: 1:48:06  lr: 0.000236  loss: 3.6137 (4.1112)  "
                 "tok_rgb@256: 5.8834 (6.4100)  loss_scale: 131072.0000 (246157.4895)  "
                 "grad_norm: nan (nan)  time: 0.3251  data: 0.0002",
                 "https://github.com/Mahlia44/2026-Spring-CS503-Visual-Intelligence-Homework/"
                 "blob/7f1676530b856d6525730b089cc7d2e06c4c208b/NanoFM_Homeworks/"
                 "multi_node_job.out", {"value": 3.6137}),
         Example("[rank3]:2025-10-28 03:55:35,695 - INFO -  step: 1520  loss:  0.1945  "
                 "grad_norm:  0.0000  memory: 61.39GiB(43.91%)  tps: 860  tflops: 39.40  "
                 "mfu: 3.98%", "https://github.com/orangingq/torchtitan/blob/ee4151183f909c7a3"
                 "2d25466532ff0bf1fbd83a4/logs/h200/1027_llama8b/slurm-549.out",
                 {"value": 0.1945})),
        convert={"iteration": int, "value": float, "iter": int, "mm_value": float,
                 "any_value": float, "bracket_iter": int, "bracket_value": float,
                 "ml_iter": int, "ml_value": float},
        extra=_mm_loss),
    Signature(
        "amp.scaler_skip", K.SCALER_SKIP, "Skipping step",
        r"(?:Gradient overflow\.\s+|OVERFLOW! (?:Rank \d+ )?)Skipping step",
        "GRAD_NONFINITE", "apex amp, DeepSpeed fp16 (routine while the scale settles)",
        (Example("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to "
                 "0.03125, ", "https://github.com/whai362/PVT/issues/94", {}),
         Example("[2021-11-13 19:22:15,963] [INFO] [stage3.py:2731:_overflow_clean_up] "
                 "[deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 4.0, "
                 "reducing to 2.0", "https://github.com/huggingface/transformers/issues/9996",
                 {}))),
    Signature(
        "cpp.terminate", K.CPP_ABORT, "terminate called after throwing",
        r"terminate called after throwing an instance of '(?P<type>[^']+)'",
        "RANK_CRASHED", "all",
        (Example("terminate called after throwing an instance of 'gloo::IoException'",
                 "https://github.com/pytorch/pytorch/issues/15592",
                 {"type": "gloo::IoException"}),)),
    Signature(
        "python.fatal_error", K.FATAL_PYTHON, "Fatal Python error",
        r"Fatal Python error: (?P<what>[^\n]+)", "RANK_CRASHED", "CPython faulthandler (all)",
        (Example("Fatal Python error: Segmentation fault",
                 "https://github.com/pytorch/pytorch/issues/72086",
                 {"what": "Segmentation fault"}),)),
    Signature(
        "shell.segfault", K.SEGFAULT, "Segmentation fault",
        r"(?:line \d+: +(?P<pid>\d+) )?Segmentation fault(?: +\(core dumped\))?", "RANK_CRASHED",
        "a shell or launcher reporting a child's SIGSEGV",
        (Example("/var/spool/PBS/mom_priv/jobs/2624847.pbsserver.SC: line 40: 215659 "
                 "Segmentation fault      (core dumped) python tools/train.py "
                 "configs/faster_rcnn_r50_fpn_1x_ucf24.py --gpus 1",
                 "https://github.com/pytorch/pytorch/issues/14586", {"pid": 215659}),),
        convert={"pid": int}),
    Signature(
        "process.exit_code", K.PROCESS_EXIT, "exit code",
        r"(?:Process finished|exited) with exit code (?P<exit_code>-?\d+)(?: \(interrupted by "
        r"signal (?P<signal_number>\d+): ?(?P<signal>\w+)\))?",
        "RANK_CRASHED", "IDE runners, shells",
        (Example("Process finished with exit code 139 (interrupted by signal 11: SIGSEGV)",
                 "https://github.com/facebookresearch/detectron2/issues/214",
                 {"exit_code": 139, "signal": "SIGSEGV"}),
         Example("Process finished with exit code 137 (interrupted by signal 9:SIGKILL)",
                 "https://github.com/noelshin/selfmask/issues/11",
                 {"exit_code": 137, "signal": "SIGKILL"})),
        convert={"exit_code": int, "signal_number": int}),
    Signature(
        # Python's CalledProcessError: "returned non-zero exit status N", or for a child a
        # signal ended "died with <Signals.SIGKILL: 9>" (its returncode is -9)
        "launcher.called_process_error", K.PROCESS_EXIT,
        ("returned non-zero exit status", "died with <Signals."),
        r"Command '(?P<command>.*)' (?:returned non-zero exit status (?P<exit_code>-?\d+)|died "
        r"with <Signals\.SIG\w+: (?P<signum>\d+)>)",
        "RANK_CRASHED", "torch.distributed.launch (torch < 1.9)",
        (Example(" \"Command '['/home/xuwuheng/anaconda3/envs/maskrcnn_benchmark/bin/python', "
                 "'-u', "
                 "'/workspace/xwh/maskrcnn-benchmark-master/tools/train_net.py', "
                 "'--local_rank=0']' returned non-zero exit status 1.\"",
                 "https://github.com/facebookresearch/maskrcnn-benchmark/issues/1075",
                 {"exit_code": 1, "launcher": "torch.distributed.launch", "local_rank": 0}),
         Example("subprocess.CalledProcessError: Command '['/opt/conda/bin/python', '-u', "
                 "'./tools/train.py', '--local_rank=1', 'configs/deeplabv3plus/"
                 "deeplabv3plus_r50-d8_512x512_40k_deepfashon2.py', '--launcher', 'pytorch']' "
                 "died with <Signals.SIGKILL: 9>.",
                 "https://github.com/open-mmlab/mmsegmentation/issues/189",
                 {"exit_code": -9, "signal": "SIGKILL", "local_rank": 1})),
        convert={"exit_code": int, "signum": int}, extra=_legacy_launch_exit),
    Signature(
        "launcher.agent_failed", K.AGENT_FAILED, "exitcode",
        r"failed \(exitcode: (?P<exit_code>-?\d+)\) local_rank: (?P<local_rank>\d+) \(pid: "
        r"(?P<pid>\d+)\)", "RANK_CRASHED", "torchrun / torch.distributed.elastic >= 1.9",
        (Example("torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) "
                 "local_rank: 1 (pid: 14447) of binary:",
                 "https://github.com/AkariAsai/self-rag/issues/83",
                 {"exit_code": -9, "local_rank": 1, "pid": 14447}),),
        convert={"exit_code": int, "local_rank": int, "pid": int}),
    Signature(
        "elastic.signal_received", K.SIGKILL, "received by PID",
        r"Signal (?P<signal_number>\d+) \((?P<signal>SIG\w+)\) received by PID"
        r"(?: (?P<pid>\d+))?",
        "RANK_CRASHED", "torch.distributed.elastic >= 1.9",
        (Example("The worker fails with {0: ProcessFailure(local_rank=0, pid=54, exitcode=-7, "
                 "error_file='<N/A>', error_file_data={'message': '<NONE>'}, message='Signal 7 "
                 "(SIGBUS) received by PID 54', timestamp=1711419181)}",
                 "https://github.com/intelligent-machine-learning/dlrover/pull/1046",
                 {"signal_number": 7, "signal": "SIGBUS", "pid": 54}),),
        convert={"signal_number": int, "pid": int}),
    Signature(
        "launch.died_with_signal", K.SIGKILL, "died with <Signals.",
        r"died with <Signals\.(?P<signal>SIG\w+): (?P<signal_number>\d+)>", "RANK_CRASHED",
        "torch.distributed.launch (torch < 1.9), mmcv/mmdet dist_train",
        (Example("In 3.x there are often errors reported: `died with <Signals.SIGKILL: 9>`.",
                 "https://github.com/open-mmlab/mmdetection/issues/10101",
                 {"signal": "SIGKILL", "signal_number": 9}),),
        convert={"signal_number": int}),
    Signature(
        # a launch command's node rank or node count: the log may be one node's of several,
        # where mp.spawn's process index is a local one (index._spawned_ranks)
        "launch.node_rank", K.NODE_RANK, ("--rank", "node_rank", "node-rank", "machine_rank",
                                          "machine-rank", "--nnodes"),
        r"(?:--(?:node[_-]rank|machine[_-]rank|rank)[= ]|\b(?:node|machine)_rank=)"
        r"(?P<node_rank>\d+)|--nnodes[= ](?P<nnodes>\d+)",
        "RANK_CRASHED", "pytorch/examples' imagenet (--rank), torchrun, detectron2",
        (Example("root@ubuntu:~# CUDA_VISIBLE_DEVICES=0  NCCL_SOCKET_IFNAME=eno1 NCCL_IB_DISABLE=1 "
                 "NCCL_DEBUG=INFO  python main.py -b 160 --dist-url 'tcp://192.168.50.11:3754' "
                 "--dist-backend 'nccl' --multiprocessing-distributed --world-size 2 --rank 1",
                 "https://github.com/FelixFu520/README/blob/027e21dc557c8c6edcebf36042d419cfd34"
                 "daa0d/envs/parallel_computing/all.md?plain=1#L410-L442", {"node_rank": 1}),
         Example("$ torchrun --nproc_per_node=8 --nnodes=2 --node_rank=1 --master_addr="
                 "123.456.123.456 --master_port=1234 train.py",
                 "https://github.com/karpathy/nanoGPT/pull/55", {"nnodes": 2})),
        convert={"node_rank": int, "nnodes": int}),
    Signature(
        "spawn.process_signal", K.SIGKILL, "terminated with signal",
        r"process (?P<process>\d+) terminated with signal (?P<signal>SIG\w+)", "RANK_CRASHED",
        "torch.multiprocessing.spawn",
        (Example("torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with "
                 "signal SIGKILL", "https://github.com/lyu-yx/ACUMEN/issues/4",
                 {"process": 0, "signal": "SIGKILL"}),),
        convert={"process": int}),
    Signature(
        # A launcher's own report of a rank it started dying (Composer's launcher): the
        # rank it names is the global rank. Negative codes are signals.
        "launcher.rank_crashed", K.PROCESS_EXIT, ("crashed with exit code",
                                                 "exited with exit code"),
        r"\b[Rr]ank (?P<process>\d+) (?:crashed|exited) with exit code (?P<exit_code>-?\d+)",
        "RANK_CRASHED", "composer's launcher (composer.cli.launcher)",
        (Example("ERROR:composer.cli.launcher:Rank 0 crashed with exit code 1.",
                 "https://github.com/mosaicml/llm-foundry/issues/215",
                 {"process": 0, "exit_code": 1}),),
        convert={"process": int, "exit_code": int}, extra=_launcher_exit),
    Signature(
        # Open MPI's report of the first process that exited non-zero: "Process name:
        # [[jobid,1],R]" (R its rank in MPI_COMM_WORLD), its code on the next line
        "mpirun.first_nonzero", K.PROCESS_EXIT, "Process name: [[",
        r"Process name: \[\[\d+,\d+\],(?P<process>\d+)\]\s+Exit code:\s+(?P<exit_code>-?\d+)",
        "RANK_CRASHED", "Open MPI >= 1.6 (mpirun, horovodrun)",
        (Example("Process name: [[22323,1],0] Exit code:    1",
                 "https://github.com/CipherDoc34/pytorch_horovod_profiling/blob/"
                 "d137e2fd3812c48f80fcbbc732b89653883ab63e/3epochs.out#L64-L65",
                 {"process": 0, "exit_code": 1}),),
        convert={"process": int, "exit_code": int}, extra=_mpirun_exit),
    Signature(
        # Lightning's own launcher (ddp strategy, no torchrun) watching the ranks it started;
        # its "[rank: N]" prefix is the dead child's local rank (reader.py)
        "lightning.child_terminated", K.PROCESS_EXIT, "Child process with PID",
        r"Child process with PID (?P<pid>\d+) terminated with code (?P<exit_code>-?\d+)",
        "RANK_CRASHED", "lightning >= 2.1 (_ChildProcessObserver)",
        (Example("[rank: 1] Child process with PID 4056289 terminated with code -9. Forcefully "
                 "terminating all other processes to avoid zombies 🧟",
                 "https://github.com/facebookresearch/dinov2/blob/93aad6083b64e9dc88bf98beb124"
                 "920ffeb5e85f/distillation/wandb/run-20250109_163517-3hvlu4xf/files/output.log",
                 {"pid": 4056289, "exit_code": -9, "signal": "SIGKILL"}),),
        convert={"pid": int, "exit_code": int}, extra=_lightning_exit),
    Signature(
        "deepspeed.loss_scale_min", K.LOSS_NAN, "loss scale already at minimum",
        r"Current loss scale already at minimum - cannot decrease scale anymore",
        "GRAD_NONFINITE", "DeepSpeed fp16 dynamic loss scaling",
        (Example("Exception: Current loss scale already at minimum - cannot decrease scale "
                 "anymore. Exiting run.", "https://github.com/hiyouga/LlamaFactory/issues/2172"),),
        extra=lambda m: {"loss_name": "the fp16 gradients", "value": "inf/NaN at every step "
                         "(DeepSpeed's loss scale hit its minimum)"}),
    Signature(
        "elastic.process_failure", K.AGENT_FAILED, "ProcessFailure(",
        r"ProcessFailure\(local_rank=(?P<local_rank>\d+), pid=(?P<pid>\d+), "
        r"exitcode=(?P<exit_code>-?\d+)", "RANK_CRASHED", "torch.distributed.elastic (dlrover)",
        (Example("The worker fails with {0: ProcessFailure(local_rank=0, pid=54, exitcode=-7, "
                 "error_file='<N/A>', error_file_data={'message': '<NONE>'}, message='Signal 7 "
                 "(SIGBUS) received by PID 54', timestamp=1711419181)}",
                 "https://github.com/intelligent-machine-learning/dlrover/pull/1046",
                 {"local_rank": 0, "pid": 54, "exit_code": -7}),),
        convert={"local_rank": int, "pid": int, "exit_code": int}),
    Signature(
        "shell.killed", K.SIGKILL, "Killed",
        r"line \d+: +(?P<pid>\d+) Killed\b", "OOM", "bash reporting a child killed by SIGKILL",
        (Example("2020-11-24 20:22:28.106 /bin/bash: line 27: 318 Killed sh start.sh",
                 "https://github.com/divamgupta/deep-clustering-kingdra/issues/2", {"pid": 318}),),
        convert={"pid": int}, extra=lambda m: {"signal": "SIGKILL"}),
    Signature(
        "progress.busy_rank", K.BUSY, "on rank",
        r"(?P<activity>[Rr]unning \w+|[Tt]okeniz\w+|[Pp]reprocess\w*|[Ss]aving \w+|[Gg]enerat\w+|"
        r"[Vv]alidat\w+|[Ee]valuat\w+|[Pp]redict\w+)\b[^\r\n|]{0,80}?\bon rank[ =:]?"
        r"(?P<busy_rank>\d+)", "HANG_RANK_MISSING_COLLECTIVE", "any progress bar naming its rank",
        (Example("Running predictions on sample clic_edm_ttbar_pf on rank=0:  25%|██▌       | "
                 "1/4 [01:49<05:29, 109.87s/it]", "https://github.com/jpata/particleflow/issues/390",
                 {"activity": "Running predictions", "busy_rank": 0}),),
        convert={"busy_rank": int}),
    Signature(
        # A data-preparation progress bar that names no rank: with the usual "main process
        # first" (HF datasets, YOLO's torch_distributed_zero_first) it is rank 0's.
        "progress.data_prep", K.BUSY,
        # the activity words, not the bar's "%|"/"it/s": every tqdm line has those, and a
        # needle on every line would make the reader examine every line (docs/benchmarks.md)
        ("Generating", "okeniz", "Grouping texts", "Map", "Filter", "reprocess", "Scanning",
         "Caching"),
        r"(?P<activity>Generating \w+ split|Running tokenizer|[Tt]okeniz\w+(?: \w+)?|"
        r"Grouping texts|Map|Filter|[Pp]reprocess\w*|Scanning|Caching \w+)\b[^:|\r\n]{0,160}:"
        r"\s*(?:\d+%\||\d+ examples \[)",
        "HANG_RANK_MISSING_COLLECTIVE", "HF datasets / tqdm progress bars",
        (Example("Generating train split: 2230000 examples [29:59, 1466.92 examples/s]",
                 "https://github.com/huggingface/alignment-handbook/issues/190",
                 {"activity": "Generating train split"}),
         Example("Tokenizing Prompts (num_proc=64):  92%|█████████▏| 328986/359152 [29:58<12:05, "
                 "41.59 examples/s]", "https://github.com/axolotl-ai-cloud/axolotl/issues/2684",
                 {"activity": "Tokenizing Prompts"}),
         Example("train: Scanning '../coco/labels/train' images and labels...43718 found, 110 "
                 "missing, 0 empty, 7 corrupted:  97%|██▉| 43830/45049 [01:07<00:18, 66.12it/s]",
                 "https://github.com/ultralytics/yolov5/issues/4400", {"activity": "Scanning"})),
        fallback=True),
    Signature(
        "elastic.closing_signal", K.TEARDOWN, "closing signal",
        r"Sending process (?P<pid>\d+) closing signal (?P<signal>SIG\w+)", "RANK_CRASHED",
        "torch.distributed.elastic >= 1.9",
        (Example("WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 4193 "
                 "closing signal SIGHUP", "https://github.com/ultralytics/ultralytics/issues/918",
                 {"pid": 4193, "signal": "SIGHUP"}),),
        convert={"pid": int}),
    Signature(
        # argparse's parser.error(): "PROG: error: MESSAGE" after its usage, exit code 2
        "argparse.error", K.CLI_ERROR,
        (": error: unrecognized arguments", ": error: the following arguments are required",
         ": error: argument ", ": error: ambiguous option"),
        # PROG is the usage line's, spaces and all: a subcommand's ("Accelerate launch
        # command: error: argument --machine_rank/--machine-rank: invalid int value: ''")
        r"^(?P<prog>[^:\s][^:]{0,80}?): error: (?P<message>(?:unrecognized arguments|the "
        r"following arguments are required|argument |ambiguous option).*)",
        "RANK_CRASHED", "Python's argparse (torch.distributed.launch's --local_rank / "
        "--local-rank)",
        (Example("train_adgen.py: error: unrecognized arguments: --local_rank=2",
                 "https://github.com/FudanNLP/CPT/issues/65",
                 {"prog": "train_adgen.py", "message": "unrecognized arguments: "
                  "--local_rank=2"}),
         Example("main.py: error: unrecognized arguments: --local-rank=0",
                 "https://github.com/skycrapers/TecoGAN-PyTorch/issues/31",
                 {"prog": "main.py", "message": "unrecognized arguments: --local-rank=0"}),
         Example("Accelerate launch command: error: argument --machine_rank/--machine-rank: "
                 "invalid int value: ''", "https://github.com/rubin-labs/dia-finetuning-stereo/"
                 "blob/c6008518aa8e2a970ec01dd109218d32c6ce9b85/train_fsdp.log",
                 {"prog": "Accelerate launch command", "message": "argument --machine_rank/"
                  "--machine-rank: invalid int value: ''"}))),
    Signature(
        # torch.utils.cpp_extension._run_ninja_build's error_prefix: the extension a rank
        # compiles when it first needs it (DeepSpeed's cpu_adam / fused_adam, ...)
        "cpp_extension.build_failed", K.EXT_BUILD, "Error building extension",
        r"Error building extension '(?P<extension>[^']+)'",
        "RANK_CRASHED", "torch >= 1.2 (torch.utils.cpp_extension.load)",
        (Example("RuntimeError: Error building extension 'fused_adam'",
                 "https://github.com/codefuse-ai/MFTCoder/issues/27",
                 {"extension": "fused_adam"}),
         Example("RuntimeError: Error building extension 'cpu_adam'",
                 "https://github.com/dredwardhyde/gpt-neo-fine-tuning-example/issues/12",
                 {"extension": "cpu_adam"}))),
    Signature(
        "ninja.build_stopped", K.EXT_BUILD, "ninja: build stopped",
        r"ninja: build stopped: (?P<why>.+?)\.?$",
        "RANK_CRASHED", "ninja (torch.utils.cpp_extension's JIT builds, pip builds)",
        (Example("ninja: build stopped: subcommand failed.",
                 "https://github.com/nunchux-ai/nunchaku/issues/346",
                 {"why": "subcommand failed"}),)),
    Signature(
        # the build tool itself is missing: the extension cannot be compiled at all
        "cpp_extension.ninja_missing", K.EXT_BUILD, "Ninja is required",
        r"(?P<compiler_error>Ninja is required to load C\+\+ extensions)",
        "RANK_CRASHED", "torch >= 1.0 (torch.utils.cpp_extension.load)",
        (Example("RuntimeError: Ninja is required to load C++ extensions",
                 "https://github.com/unlimblue/KNN_CUDA/issues/14",
                 {"compiler_error": "Ninja is required to load C++ extensions"}),
         Example("[rank0]: RuntimeError: Ninja is required to load C++ extensions",
                 "https://github.com/XWWW-XD/STReasoner_reproduce/blob/ddabbfe3a77483a64d0872"
                 "8619a664066456e1ac/00_new_codes/repro_autodl/experiments/logs/single_a100_"
                 "qwen3_4b_stage1_smoke_retry_bnb0452_20260604_112548.log",
                 {"compiler_error": "Ninja is required to load C++ extensions"}))),
    Signature(
        # gcc / g++ / nvcc's own error line on a source or header file: the reason a build
        # above failed (the first one is the one to read)
        "compiler.error", K.EXT_BUILD, ": error: ",
        # (?<!\S): tried where a word starts, not at each offset of a long one
        r"(?<!\S)(?P<file>\S+\.(?:c|cc|cpp|cxx|cu|cuh|h|hpp)):\d+(?::\d+)?: (?:fatal )?error: "
        r"(?P<compiler_error>.+)",
        "RANK_CRASHED", "gcc, g++, nvcc",
        (Example("/users/zhu/anaconda3/lib/python3.12/site-packages/torch/include/c10/util/"
                 "C++17.h:13:2: error: #error \"You're trying to build PyTorch with a too old "
                 "version of GCC. We need GCC 9 or later.\"",
                 "https://github.com/ZhiyiHu1999/DistributedSysLab_FS24/blob/8147f54d56c7c71"
                 "292fc5338da4d070fcfa2f1a2/deepspeed_example/deepspeed_example.526821.o",
                 {"compiler_error": "#error \"You're trying to build PyTorch with a too old "
                  "version of GCC. We need GCC 9 or later.\""}),)),
    Signature(
        # torch._utils.ExceptionWrapper's wording when torch.nn.DataParallel re-raises a
        # replica's error: the whole job is one process (rank 0), one thread per GPU
        "torch.data_parallel_replica", K.ONE_PROCESS, " in replica ",
        r"Caught (?P<exception>\w+) in replica (?P<replica>\d+) on device (?P<device>\d+)",
        "RANK_CRASHED", "torch >= 1.0 (torch.nn.DataParallel)",
        (Example("RuntimeError: Caught RuntimeError in replica 1 on device 1.",
                 "https://github.com/NielsRogge/Transformers-Tutorials/issues/133",
                 {"exception": "RuntimeError", "replica": 1, "device": 1}),
         Example("torch.OutOfMemoryError: Caught OutOfMemoryError in replica 0 on device 0.",
                 "https://github.com/gtseligas/lcn-llama/blob/9fcec36a8056aac67457978be2d93f6"
                 "488fe7937/train.err#L1-L135",
                 {"exception": "OutOfMemoryError", "replica": 0, "device": 0})),
        convert={"replica": int, "device": int}),
    Signature(
        # Megatron's (and NeMo's) own count of the processes it starts the process group
        # with: one worker is a job of one process, rank 0 (a single-GPU run under torchrun)
        "megatron.world_of_one", K.ONE_PROCESS, "initializing torch distributed with 1 worker",
        r"initializing torch distributed with (?P<workers>1) workers?\b", "RANK_CRASHED",
        "Megatron-LM, Megatron-DeepSpeed, NeMo",
        (Example("> initializing torch distributed with 1 workers.",
                 "https://github.com/tinawu-research/ClawAndOrder/blob/1fb4362585d9b0e41f5972"
                 "4cc941582f169d6598/training/logs/nemo_lora_20260731-132916.log",
                 {"workers": 1}),),
        convert={"workers": int}),
    Signature(
        "elastic.death_signal", K.LAUNCHER_SIGNALLED, "death signal, shutting down workers",
        r"Received (?P<signum>\d+) death signal, shutting down workers",
        "UNRECOGNIZED_FAILURE", "torch.distributed.elastic's agent (torchrun, accelerate launch)",
        (Example("WARNING:torch.distributed.elastic.agent.server.api:Received 1 death signal, "
                 "shutting down workers",
                 "https://github.com/hiyouga/ChatGLM-Efficient-Tuning/issues/72",
                 {"signum": 1}),),
        convert={"signum": int}),
    Signature(
        # DeepSpeed's launcher stopping its workers because it was signalled itself
        "deepspeed.launcher_signalled", K.LAUNCHER_SIGNALLED, "Main process received SIG",
        r"Main process received (?P<signame>SIG[A-Z]+), exiting",
        "UNRECOGNIZED_FAILURE", "deepspeed.launcher.launch (sigkill_handler)",
        (Example("[2025-02-20 20:27:14,902] [INFO] [launch.py:328:sigkill_handler] Main process "
                 "received SIGINT, exiting",
                 "https://github.com/CqGao112/CN-Mini-Phi3/blob/"
                 "4074a0161045ab30257f5fd976d9e8d83db948b7/dpo.log#L329",
                 {"signame": "SIGINT"}),)),
    Signature(
        # Lightning's signal connector on a rank that got SIGTERM from outside (a kill, a
        # scheduler's or a pod's stop): it logs it, its DataLoader workers die of it next
        "lightning.sigterm", K.LAUNCHER_SIGNALLED, "Received SIGTERM: ",
        r"Received SIGTERM: (?P<signum>\d+)",
        "UNRECOGNIZED_FAILURE", "lightning >= 1.6 (SignalConnector._sigterm_notifier_fn)",
        (Example("[rank: 2] Received SIGTERM: 15",
                 "https://github.com/TengFeiyang01/EAGNet/blob/"
                 "b8e3915571420a90e594b9f69110a173d87dae62/logs/train.out",
                 {"signum": 15}),),
        convert={"signum": int}),
    Signature(
        # A launcher's start-up banner: in a log that holds several launches (a batch
        # script's retries, `>>` onto one file), one starts here (diagnose/launches.py)
        "launcher.start", K.LAUNCH_START,
        ("Setting OMP_NUM_THREADS environment variable for each process",
         "torch.distributed.launch is deprecated", "WORLD INFO DICT"),
        r"Setting OMP_NUM_THREADS environment variable for each process|"
        r"(?P<deprecated>torch\.distributed\.launch) is deprecated|WORLD INFO DICT",
        "UNRECOGNIZED_FAILURE", "torchrun; torch.distributed.launch; deepspeed.launcher.launch",
        (Example("Setting OMP_NUM_THREADS environment variable for each process to be 1 in "
                 "default, to avoid your system being overloaded, please further tune the "
                 "variable for optimal performance in your application as needed. ",
                 "https://github.com/pytorch/pytorch/issues/107021"),
         Example("/gpfswork/rech/six/commun/conda/hf-prod/lib/python3.8/site-packages/torch/"
                 "distributed/launch.py:178: FutureWarning: The module torch.distributed.launch"
                 " is deprecated", "https://github.com/bigscience-workshop/bigscience/blob/"
                 "master/experiments/bandwidth/all_reduce_bench-a100-n4.txt",
                 {"deprecated": "torch.distributed.launch"}),
         Example("[2025-12-28 05:01:38,135] [INFO] [launch.py:162:main] WORLD INFO DICT: "
                 "{'localhost': [0, 1]}",
                 "https://github.com/hongbo-miao/hongbomiao.com/pull/37505"))),
    Signature(
        # torchelastic's agent restarting the worker group (a failed attempt, with restarts
        # left, or nodes that joined): a new attempt starts here, and what it does is the
        # job's fate, not the attempt before (diagnose/launches.py)
        "launcher.restart", K.LAUNCH_START, ("; will restart worker group",),
        r"Worker group (?P<state>FAILED|UNHEALTHY)\. (?P<attempts_left>\d+)/(?P<max_restarts>\d+)"
        r" attempts left; will restart worker group|Detected (?P<new_nodes>\d+) new nodes from "
        r"group_rank=\d+; will restart worker group",
        "UNRECOGNIZED_FAILURE", "torchelastic's agent (torchrun --max-restarts, elastic jobs)",
        (Example("I1128 12:03:59.734000 11045 torch/distributed/elastic/agent/server/api.py:942]"
                 " [default] Worker group FAILED. 1/1 attempts left; will restart worker group",
                 FIX + "restart_recovers.log",
                 {"state": "FAILED", "attempts_left": 1, "max_restarts": 1}),
         Example("[INFO] 2020-07-31 07:35:16,348 api: [default] Detected 1 new nodes from "
                 "group_rank=1; will restart worker group",
                 "https://github.com/microsoft/frameworkcontroller/blob/c61269671d941d7b5d4c36d"
                 "ef37078c8f0621ead/example/framework/scenario/pytorch/elastic/README.md",
                 {"new_nodes": 1})),
        convert={"attempts_left": int, "max_restarts": int, "new_nodes": int},
        # what launches.Split and triage read to call the next launch an attempt
        extra=lambda m: {"restart": True}),
    Signature(
        # A launcher's own word that a process, or its whole worker group, ended well: the
        # resets and store warnings its peers print after it are the teardown
        # (rules_crash.peer_gone)
        "launcher.succeeded", K.LAUNCH_SUCCEEDED,
        ("exits successfully", "finished (SUCCEEDED)", "finished (WorkerState.SUCCEEDED)",
         "successfully finished"),
        r"Process (?P<pid>\d+) exits successfully|Local worker group finished "
        r"\((?:WorkerState\.)?SUCCEEDED\)|(?:worker group|All workers) successfully finished",
        "RANK_CRASHED", "deepspeed.launcher.launch; torchelastic's agent",
        (Example("[2023-04-18 03:20:41,455] [INFO] [launch.py:460:main] Process 73593 exits "
                 "successfully.", "https://github.com/microsoft/DeepSpeedExamples/blob/master/"
                 "applications/DeepSpeed-Chat/training/step1_supervised_finetuning/"
                 "training_log_output/opt-1.3b-globalBatchSize128.log", {"pid": 73593}),
         Example("INFO:torch.distributed.elastic.agent.server.api:Local worker group finished "
                 "(SUCCEEDED). Waiting 300 seconds for other agents to finish",
                 "https://github.com/ultralytics/yolov5/issues/5160"),
         Example("I1128 12:04:04.921000 11045 torch/distributed/elastic/agent/server/api.py:932]"
                 " [default] worker group successfully finished. Waiting 300 seconds for other "
                 "agents to finish.", FIX + "restart_recovers.log"),
         Example("[INFO] 2020-07-31 07:55:16,413 api: [default] All workers successfully "
                 "finished.", "https://github.com/microsoft/frameworkcontroller/blob/c61269671d9"
                 "41d7b5d4c36def37078c8f0621ead/example/framework/scenario/pytorch/elastic/"
                 "README.md")),
        convert={"pid": int}),
    Signature(
        # A trainer's own word that training is over: a crash after it (an abort or a
        # segfault while the process exits) cost no result (rules_crash.after_completion)
        "trainer.completed", K.JOB_DONE,
        ("Training completed", "Trainer.fit` stopped", "after training is done",
         "Training finished", "Finished Training", "raining complete", "raining Complete",
         "RAINING COMPLETE"),
        r"(?P<what>Training completed|`Trainer\.fit` stopped: [^\n]*? reached|\[after training "
        r"is done\]|Training finished|Finished Training)"
        # a closing banner ("Phase 3 Training Complete!"): the line ends there and names
        # no smaller unit of a run (an epoch's, a fold's, a stage's "training complete" is
        # not the job's end, nor is "pre-training complete"); index._done_then_trained
        # drops one the job's losses follow
        r"|^(?:(?![Ee]poch|EPOCH|[Ss]teps?\b|[Ff]old|[Ss]tage|[Rr]ound|[Ii]ter|[Tt]ask|"
        r"[Uu]ntil|[Ww]aiting).)*?(?<![-\w])(?P<banner>(?:[Tt]raining|TRAINING) "
        r"(?:[Cc]omplete|COMPLETE))[!.]?\s*$",
        "RANK_CRASHED", "torchtitan, Lightning, Megatron-LM, prime-rl, DeepSpeed examples",
        (Example("[rank0]:[titan] 2026-05-18 16:05:29,420 - root - INFO - Training completed",
                 "https://github.com/pytorch/torchtitan/pull/3393",
                 {"what": "Training completed"}),
         Example("`Trainer.fit` stopped: `max_epochs=30` reached.",
                 "https://github.com/facebookresearch/dinov2/blob/93aad6083b64e9dc88bf98beb1249"
                 "20ffeb5e85f/distillation/wandb/run-20250110_125056-kuwhwjyb/files/output.log"),
         Example("[after training is done] datetime: 2024-09-14 19:39:16",
                 "https://github.com/hwang2006/large-scale-lm-tutorials/blob/a7341cb0b52b8556ff"
                 "bab4bf1bceb98ba85dd150/docs/06_tensor_parallelism.md?plain=1#L2129-L2863"),
         Example("06-16 21:29:32 [TRAIN] [Rank 0] [INFO] [train.py:535] Training finished, "
                 "exiting ...", "https://github.com/PrimeIntellect-ai/prime-rl/pull/417"),
         Example("Finished Training",
                 "https://github.com/wangshuai09/Notebook/blob/0cdb21d3aa700dcf781e997f500eec2d"
                 "3a14d635/DeepSpeed/moe%E7%89%B9%E6%80%A7%E9%80%82%E9%85%8D.md"),
         Example("Phase 3 Training Complete!",
                 "https://github.com/SujeethJinesh/LatentWire/blob/4a2d7cab4d513503e6bb2cbad2d"
                 "fea16fe50fb88/runs/telepathy_v3_20251128_182147/train.log",
                 {"banner": "Training Complete"}))),
    Signature(
        # MLPerf's logger (mlperf_logging.mllog) closing a run that reached its target
        "mlperf.run_stop_success", K.JOB_DONE, '"key": "run_stop"',
        r'"key": "run_stop".*"status": "(?P<what>success)"',
        "RANK_CRASHED", "mlperf_logging (every MLPerf Training submission)",
        (Example(':::MLLOG {"namespace": "", "time_ms": 1759944819869, "event_type": '
                 '"INTERVAL_END", "key": "run_stop", "value": null, "metadata": {"file": '
                 '"/workspace/src/callbacks/custom_callbacks.py", "lineno": 230, '
                 '"samples_count": 3072, "status": "success", "duration": "914.2553992271423 '
                 'sec -> 15.237589987119039 minutes"}}',
                 "https://github.com/mlcommons/training_results_v5.1/blob/441d65f4445cd59687466"
                 "533fd9f55399136e7a4/MangoBoost/results/MI300X-LLMBoost-GPUBoost-2node/"
                 "llama2_70b_lora/result_0.txt", {"what": "success"}),)),
)
