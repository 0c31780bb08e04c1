"""The floor: failure evidence, recognised without knowing what caused it.

The knowledge base (``kb/``) knows error texts one by one; a log whose failure it has never
seen must still not come out "healthy". This module is the net under it: a short table of
the *kinds* of lines that prove a job failed, whatever wrote them:

- a launcher or scheduler reporting a worker's death (DeepSpeed's launcher, the old
  ``torch.distributed.launch``, accelerate, ``mp.spawn``, mpirun, srun/slurmstepd,
  Kubernetes pod status), in any wording that carries a non-zero code or a signal;
- a process killed outright (a shell's ``Killed``, ``Segmentation fault (core dumped)``);
- the GPU or its bus failing (NVML cannot reach it, PCIe AER errors);
- training numbers that stopped being finite (a loss of NaN, a loss scale collapsed to 1
  or below, a scaler at its minimum).

Each pattern keeps real lines from public threads as examples
(``tests/unit/test_logscan_floor.py`` runs them).
The scanner emits a ``FLOOR`` event for a hit; triage turns hits into a finding only when
no rule found an error, so the floor never changes a diagnosis, it only forbids "healthy".
Pure: no files, no processes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from ddpdoctor.core.signames import killed_by
from ddpdoctor.diagnose.kb.signature import NeedleIndex


class Evidence(str, Enum):
    """What kind of proof of failure a line is."""

    LAUNCHER_DEATH = "a launcher reported a worker's death"
    PROCESS_KILLED = "a process was killed or crashed"
    HARDWARE = "a GPU or bus error"
    NONFINITE = "training numbers stopped being finite"
    LIBRARY_ERROR = "a communication library reported an error"
    ERROR_RECORD = "a program logged an error record"


@dataclass(frozen=True)
class FloorPattern:
    """One kind of failure line. ``accept`` filters matches (a zero exit code is no death)."""

    name: str
    evidence: Evidence
    needles: tuple[str, ...]
    pattern: str
    examples: tuple[tuple[str, str], ...]  # (real line, source URL)
    oom: bool = False  # the line itself says the kill was for memory
    # the signal the wording stands for where it names none (a worker that vanished)
    implied_signal: str | None = None
    accept: Callable[[Mapping[str, str | None]], bool] | None = None
    flags: int = 0
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", re.compile(self.pattern, self.flags))


@dataclass(frozen=True)
class FloorHit:
    pattern: str
    evidence: Evidence
    exit_code: int | None = None
    signal: str | None = None
    rank: int | None = None  # the rank the line names, when it names one
    oom: bool = False
    # the launcher's task the line names (srun's "task 3"): a rank where srun started the
    # ranks, a node's agent where it started a launcher per node (diagnose/tasklabel.py)
    task: int | None = None
    # every task the line names ("tasks 0-2,5"), where it names more than one
    tasks: tuple[int, ...] = ()


def _task_list(text: str) -> tuple[int, ...]:
    """srun's task list ("0-2,5") -> (0, 1, 2, 5); () for a list too long to be ranks'."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return ()
        first, last = int(lo), int(hi or lo)
        if last < first or len(out) + last - first >= 4096:
            return ()
        out.extend(range(first, last + 1))
    return tuple(out)


def _nonzero(d: Mapping[str, str | None]) -> bool:
    return d.get("code") not in (None, "0")


def _collapsed(d: Mapping[str, str | None]) -> bool:
    """A dynamic loss scale halves on every overflow and grows back after a run of good
    steps; a healthy fp16 run settles at 2^10-2^16. Down to 8 or below, a dozen or more
    overflows in a row happened: the scaler does not recover (it goes on to 0 or to its
    minimum, and every step is skipped). Measured where the scaler says it reduced."""
    text = d.get("scale")
    if text is None:
        return False
    try:
        scale = float(text)
    except ValueError:
        return False
    if d.get("reducing"):
        return scale <= 8.0
    # A status line ("loss scale: 1.0" in every Megatron iteration line) is also what a
    # bf16 or fp32 run prints: its static scale is 1. Only a dynamic scale fallen below
    # any static setting is a collapse there.
    return scale < 1.0


_DS = "https://github.com/deepspeedai/DeepSpeed/issues/"
_M4_NODE_FAILURE = ("https://github.com/huggingface/m4-logs/blob/master/tr_141-hanging/"
                    "tr_141_cm409xPMD01_scale_leap_of_faith_v5_num_workers_06/README.md")
_HVD = "https://github.com/horovod/horovod/issues/"

PATTERNS: tuple[FloorPattern, ...] = (
    FloorPattern(
        "deepspeed.launcher_exit", Evidence.LAUNCHER_DEATH, ("exits with return code",),
        # The command the line quotes is the launcher's last spawned one, not the failed
        # rank's (kb/deepspeed.py): its --local_rank names the rank only when it is 0.
        r"--local_rank=(?P<rank>0)'.*exits with return code = (?P<code>-?\d+)"
        r"|exits with return code = (?P<code2>-?\d+)",
        (("[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3'"
          ", '-u', 'main.py', '--local_rank=0', '--zero_stage', '2', '--deepspeed'] exits with "
          "return code = -9", _DS + "3232"),
         ("[ERROR] [launch.py:321:sigkill_handler [xxx] exits with return code = -9",
          _DS + "4890")),
        accept=lambda d: d.get("code") not in (None, "0") or d.get("code2") not in (None, "0")),
    FloorPattern(
        # Ray Tune's summary when a trial (a Ray Train job) failed: its error is in a file
        # the log names, not in the log.
        "ray.trials_failed", Evidence.LAUNCHER_DEATH, ("Trials did not complete",),
        r"Trials did not complete: \[(?P<trials>[^\]]+)\]",
        (("2022-11-15 19:26:36,618\tERROR tune.py:773 -- Trials did not complete: "
          "[TorchTrainer_96bfe_00000]", "https://github.com/ray-project/ray/issues/30333"),)),
    FloorPattern(
        "deepspeed.killing_subprocess", Evidence.LAUNCHER_DEATH, ("Killing subprocess",),
        # DeepSpeed < 0.4 printed it bare, one line per rank it killed
        r"sigkill_handler\] Killing subprocess \d+|^Killing subprocess \d+\s*$",
        (("[2023-07-20 15:45:13,980] [INFO] [launch.py:315:sigkill_handler] Killing subprocess "
          "3966", _DS + "4000"),
         ("Killing subprocess 8189", "https://github.com/bigscience-workshop/bigscience/blob/"
          "master/experiments/gpt2-meg-ds-zero/meg_ds_zero_gpt2_perf_n16-1999616.out"),
         ("[2023-03-20 20:31:29,210] [INFO] [launch.py:315:sigkill_handler] Killing subprocess "
          "3353707", _DS + "5302"))),
    FloorPattern(
        "elastic.child_failed", Evidence.LAUNCHER_DEATH, ("ChildFailedError",),
        r"\bChildFailedError\b",
        (("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
          "https://github.com/lmzpai/roboMamba/issues/10"),)),
    FloorPattern(
        # the elastic agent writing a failure's error record (its JSON follows: the
        # exception's name and message), for a worker or for the agent itself
        "elastic.error_record", Evidence.LAUNCHER_DEATH, ("errors.error_handler:",),
        r"elastic\.multiprocessing\.errors\.error_handler:",
        (("ERROR:torch.distributed.elastic.multiprocessing.errors.error_handler:{",
          "https://github.com/kubeflow/trainer/issues/1638"),)),
    FloorPattern(
        "native.caught_signal", Evidence.PROCESS_KILLED, ("Caught signal", "Signal: "),
        r"Caught signal (?P<signum>\d+) \(|\] Signal: [A-Z][\w ]+ \((?P<signum2>\d+)\)",
        (("[8d6bf97c3bf4:3039 :0:3095] Caught signal 7 (Bus error: nonexistent physical address)",
          "https://github.com/msr-fiddle/pipedream/issues/76"),
         ("[nmyjs-202-75:40360] Signal: Aborted (6)", _HVD + "489"))),
    FloorPattern(
        "python.called_process_error", Evidence.LAUNCHER_DEATH, ("non-zero exit status",),
        r"--local_rank=(?P<rank>\d+)'.*returned non-zero exit status (?P<code>-?\d+)"
        r"|returned non-zero exit status (?P<code2>-?\d+)",
        (("subprocess.CalledProcessError: Command '['/home/yh/anaconda3/bin/python', '-u', "
          "'train.py', '--local_rank=0']' returned non-zero exit status 1.",
          "https://github.com/megvii-research/MSPN/issues/31"),
         ("subprocess.CalledProcessError: Command returned non-zero exit status -11",
          "https://github.com/MarvinTeichmann/MultiNet/issues/61")),
        accept=lambda d: d.get("code") not in (None, "0") or d.get("code2") not in (None, "0")),
    FloorPattern(
        "spawn.terminated", Evidence.LAUNCHER_DEATH, ("terminated with signal",
                                                      "terminated with exit code"),
        r"process (?P<rank>\d+) terminated with (?:signal (?P<sig>SIG[A-Z]+)|exit code "
        r"(?P<code>-?\d+))",
        (("torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with "
          "signal SIGKILL", "https://github.com/resistzzz/Prompt4NR/issues/3"),),
        accept=lambda d: d.get("sig") is not None or _nonzero(d)),
    FloorPattern(
        "mpirun.signal", Evidence.LAUNCHER_DEATH, ("exited on signal",),
        r"process rank (?P<rank>\d+) with PID \S+ on node \S+ exited on signal (?P<signum>\d+)",
        (("mpirun noticed that process rank 7 with PID 0 on node HOSTNAME exited on signal 9 "
          "(Killed).", _HVD + "469"),)),
    FloorPattern(
        "mpirun.nonzero", Evidence.LAUNCHER_DEATH, ("non-zero exit code",
                                                    "exited with non-zero status"),
        r"exited with non-zero status|non-zero exit code\. Per user-direction",
        (("mpirun detected that one or more processes exited with non-zero status, thus "
          "causing", _HVD + "1421"),
         ("a non-zero exit code. Per user-direction, the job has been aborted.",
          _HVD + "469"))),
    FloorPattern(
        "slurm.task", Evidence.LAUNCHER_DEATH, ("srun: error:",),
        r"srun: error: \S+: tasks? (?P<tasklist>(?P<task>\d+)[-,\d]*): (?P<what>Killed|"
        r"Out Of Memory|"
        r"Segmentation fault|Aborted|Bus error|Terminated|Exited with exit code (?P<code>\d+))",
        (("srun: error: gpu001: task 0: Out Of Memory",
          "https://github.com/FoNDUE-HTR/Documentation/issues/5"),),
        accept=lambda d: (d.get("what") or "").startswith("Exited") is False or _nonzero(d)),
    FloorPattern(
        "slurm.oom_kill", Evidence.LAUNCHER_DEATH, ("oom-kill", "oom_kill"),
        r"Detected \d+ oom[-_]kill event",
        (("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.batch cgroup. Some of "
          "your processes may have been killed by the cgroup out-of-memory handler.",
          "https://github.com/ArjunaCluster/ArjunaUsers/issues/52"),), oom=True),
    FloorPattern(
        "slurm.cancelled", Evidence.LAUNCHER_DEATH, ("CANCELLED AT",),
        # "ON host" before or after (older slurmstepd), a reason with its own tail
        r"\*\*\* (?:JOB|STEP) \S+ (?:ON \S+ )?CANCELLED AT \S+(?: DUE TO (?P<what>[A-Z ]+?))?"
        r"(?:, [^*]*)? \*\*\*",
        (("slurmstepd: error: *** JOB 18886 ON compute-permanent-node-954 CANCELLED AT "
          "2023-11-24T10:25:54 DUE TO TIME LIMIT ***",
          "https://github.com/NVIDIA/JAX-Toolbox/pull/398"),
         ("slurmstepd: error: *** STEP 6053.0 ON DEL2212S020 CANCELLED AT 2024-04-23T12:18:08 ***",
          "https://github.com/IGNF/myria3d/issues/123"),
         ("slurmstepd: *** JOB 1479012 CANCELLED AT 2015-02-04T06:33:25 *** on sh-2-3",
          "https://github.com/bcbio/bcbio-nextgen/issues/741"),
         ("slurmstepd: error: *** STEP 1943824.0 ON jean-zay-iam17 CANCELLED AT "
          "2023-03-06T03:17:51 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
          _M4_NODE_FAILURE))),
    FloorPattern(
        # seff's (and job-feedback epilogues') end state of a batch job: the scheduler's
        # word that it did not complete, where the job's own output just stops
        "slurm.job_state", Evidence.LAUNCHER_DEATH, ("State: ",),
        r"^\s*State: (?P<what>TIMEOUT|FAILED|OUT_OF_MEMORY|NODE_FAIL|CANCELLED|PREEMPTED|"
        r"BOOT_FAIL|DEADLINE)\b(?: by \d+)?(?: \(exit code (?P<code>\d+)\))?\s*$",
        (("State: TIMEOUT (exit code 0)",
          "https://github.com/nilsblank/LLaMA-Factory-RoboG-v2/blob/"
          "0bbf7907de1a01b4c75b5fca45b1b280bd4344dc/logs/outputs/RoboG_3589949.out"),)),
    FloorPattern(
        # the scheduler refused the step: nothing of it ran (a policy, a partition, a size)
        "slurm.allocation_refused", Evidence.LAUNCHER_DEATH,
        ("Unable to allocate resources", "Batch job submission failed"),
        r"(?:srun|salloc): error: Unable to allocate resources: (?P<why>.+)"
        r"|sbatch: error: Batch job submission failed: (?P<why2>.+)",
        (("srun: error: Unable to allocate resources: Job violates accounting/QOS policy (job "
          "submit limit, user's size and/or time limits)",
          "https://github.com/AMD-AGI/sand-pipeline/blob/12b5cc093e6bc5d0f7c3b077ae55e2d0c2bb12b6"
          "/train/output.sh"),)),
    FloorPattern(
        # Ray's report of a worker process that vanished without an error of its own: its
        # connection ended (SYSTEM_ERROR); Ray names a SIGKILL by the OOM killer first
        "ray.worker_died", Evidence.PROCESS_KILLED, ("A worker died or was killed",),
        r"A worker died or was killed while executing (?:a|the) task by an unexpected system "
        r"error",
        (("2023-01-17 17:21:35,472\tWARNING worker.py:1829 -- A worker died or was killed "
          "while executing a task by an unexpected system error. To troubleshoot the problem, "
          "check the logs for the dead worker.", "https://github.com/ray-project/ray/issues/31828"),),
        implied_signal="SIGKILL"),
    FloorPattern(
        "slurm.node_failure", Evidence.LAUNCHER_DEATH, ("srun: error: Node failure",),
        r"srun: error: Node failure on (?P<node>\S+)",
        (("srun: error: Node failure on jean-zay-iam37", _M4_NODE_FAILURE),)),
    FloorPattern(
        "kubernetes.oomkilled", Evidence.LAUNCHER_DEATH, ("OOMKilled",),
        r"\bOOMKilled\b",
        (("Signal 9 (SIGKILL) (OOMKilled) during Training",
          "https://github.com/xxayt/MGSV/issues/2"),), oom=True),
    FloorPattern(
        "elastic.failed", Evidence.LAUNCHER_DEATH, ("failed (exitcode:",),
        r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<rank>\d+)",
        (("E0325 20:57:27.620000 2606 site-packages/torch/distributed/elastic/multiprocessing/"
          "api.py:869] failed (exitcode: -9) local_rank: 5 (pid: 2630) of binary: "
          "/root/miniconda3/bin/python", "https://github.com/lmzpai/roboMamba/issues/10"),),
        accept=_nonzero),
    FloorPattern(
        "generic.exit_code", Evidence.LAUNCHER_DEATH, ("xit code", "xit status",
                                                       "eturn code", "xitcode"),
        r"(?i:\b(?:exit(?:ed)?(?: with)? (?:code|status)|exitcode|return code))\s*[:=]?\s*"
        r"(?P<code>-?\d+)",
        (("  Exit code:    1", _HVD + "1421"),
         ("RuntimeError: mpirun failed with exit code 139", _HVD + "1941")),
        accept=_nonzero),
    FloorPattern(
        "shell.killed", Evidence.PROCESS_KILLED, ("Killed", "core dumped", "Segmentation fault",
                                                  "Bus error"),
        r"(?:^|\s)(?P<what>Killed|Segmentation fault|Aborted|Bus error)(?: \(core dumped\))?"
        r"\s+(?:python\S*|torchrun|deepspeed|accelerate|\S*\.py|\S*/python\S*)(?:\s|$)"
        r"|^(?P<what2>Killed|Segmentation fault \(core dumped\)|Aborted \(core dumped\)|"
        r"Bus error \(core dumped\))\s*$",
        (("/var/spool/slurmd/job00191/slurm_script: line 28:  8156 Killed                  "
          "python3 main.py --prop hform --epochs 400",
          "https://github.com/ArjunaCluster/ArjunaUsers/issues/52"),
         ("Killed", "https://github.com/ArjunaCluster/ArjunaUsers/issues/52"))),
    FloorPattern(
        "ray.worker_died", Evidence.LAUNCHER_DEATH,
        ("worker process has died", "A worker died or was killed", "Worker unexpectedly exits"),
        r"worker process has died|A worker died or was killed|Worker unexpectedly exits",
        (("The actor is dead because its worker process has died. Worker exit type: "
          "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error "
          "code 2.", "https://github.com/verl-project/verl/issues/472"),)),
    FloorPattern(
        # NCCL's WARN lines of healthy jobs are about optional pieces (libibverbs, its
        # service threads at exit); one that says Error or a CUDA failure is NCCL failing.
        "nccl.warn_error", Evidence.LIBRARY_ERROR, ("NCCL WARN Error", "NCCL WARN Cuda failure"),
        r"NCCL WARN (?:Error\b|Cuda failure)",
        (("[7] graph/rings.cc:38 NCCL WARN Error : ring 0 does not loop back to start (13 != "
          "15).", "https://github.com/NVIDIA/nccl/issues/1020"),),
        accept=lambda d: True),
    FloorPattern(
        # torch's wrapper of any NCCL failure, an InfiniBand driver's failed work completion,
        # Open MPI's TCP transport refusing a peer: a communication library's own error.
        "comm.library_error", Evidence.LIBRARY_ERROR,
        ("NCCL error in:", "got completion with error", "btl_tcp_endpoint"),
        r"NCCL error in: \S+|mlx\d: \S+: got completion with error|"
        r"\[btl_tcp_endpoint\.c:\d+:\w+\] (?:received unexpected process identifier|"
        r"peer hung up|connect\(\) to \S+ failed)",
        (("fail to new train...e= NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:"
          "272, unhanled system error", "https://github.com/pytorch/pytorch/issues/23363"),
         ("(LLMRayActor pid=90738, ip=172.19.24.110) mlx5: host_unknown: got completion with "
          "error:", "https://github.com/OpenRLHF/OpenRLHF/issues/621"),
         ("[second-node][[22157,1],4][btl_tcp_endpoint.c:626:mca_btl_tcp_endpoint_recv_connect_"
          "ack] received unexpected process identifier [[22157,1],7]",
          "https://github.com/horovod/horovod/issues/1516")),
        accept=lambda d: True),
    FloorPattern(
        # nccl-tests' own report of a failed call ("Test NCCL failure common.cu:777 '...'",
        # "host pid N: Test failure common.cu:1189"), and an Ascend CANN runtime error code
        # (EI0002: an HCCL collective timed out): a library's error, whatever it says
        "accel.test_or_runtime_failure", Evidence.LIBRARY_ERROR,
        ("Test CUDA failure", "Test NCCL failure", ": Test failure", "[PID: "),
        r"Test (?:CUDA |NCCL )?failure \S+:\d+|^E[A-Z]\d{4}: \[PID: \d+\]",
        (("fastmoe: Test NCCL failure common.cu:777 'unhandled system error'",
          "https://github.com/NVIDIA/nccl/issues/473"),
         (" .. gpu-1-1 pid 3617715: Test failure common.cu:1189",
          "https://github.com/NVIDIA/nccl-tests/issues/369"),
         ("EI0002: [PID: 7277] 2024-11-28-11:59:30.645.648 The wait execution of the Notify "
          "register times out.", "https://github.com/Ascend/pytorch/blob/"
          "af7cebeb892bfed77d9cdf1f227470f1046f8646/docs/zh/user_guide/troubleshooting/"
          "troubleshooting_cases/HCCL_timeout.md")),
        accept=lambda d: True),
    FloorPattern(
        "kubernetes.evicted", Evidence.LAUNCHER_DEATH, ("Evicted", "low on resource"),
        r"Warning\s+Evicted\s|^Reason:\s+Evicted\b|\d+/\d+\s+Evicted\s|"
        r"The node was low on resource: (?P<resource>[\w-]+)",
        (("  Warning  Evicted              109s  kubelet                                Pod "
          "ephemeral local storage usage exceeds the total limit of containers 5Gi.",
          "https://github.com/substratusai/runbooks/issues/92"),
         ("agents-ppo-ant-feedforward-93168c9e-master-...           0/1       Evicted   0     "
          "     19h", "https://github.com/kubeflow/trainer/issues/301"),
         ("Message:        The node was low on resource: memory.",
          "https://github.com/kubeflow/trainer/issues/301")),
        accept=lambda d: True),
    FloorPattern(
        "ray.memory_pressure", Evidence.LAUNCHER_DEATH, ("killed due to memory pressure",),
        r"Workers? \(tasks / actors\) killed due to memory pressure",
        (("(raylet) [2025-12-07 09:57:19,206 E 393463 393463] (raylet) node_manager.cc:3277: 2 "
          "Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due "
          "to other reasons at", "https://github.com/WM-PO/WMPO/issues/3"),), oom=True),
    FloorPattern(
        # a debugger's (or a core file's) backtrace of a process that aborted
        "native.abort_backtrace", Evidence.PROCESS_KILLED, (" in abort ", " in raise "),
        r"^#\d+\s+0x[0-9a-f]+ in (?:__GI_)?(?P<what>abort|raise) \(",
        (("#1  0x000014753985ae05 in abort () from /lib64/libc.so.6",
          "https://github.com/stas00/ml-engineering/blob/master/debug/pytorch.md"),),
        accept=lambda d: True),
    FloorPattern(
        "hardware.nvml", Evidence.HARDWARE, ("Unable to determine the device handle",
                                             "fallen off the bus", "AER:", "Xid"),
        r"Unable to determine the device handle for GPU|fallen off the bus|"
        r"AER: (?:Uncorrected|Corrected|Multiple Uncorrected)|NVRM: Xid",
        (("Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error",
          "https://github.com/xxd3vin/workspace/issues/19"),
         ("Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost. Reboot the "
          "system to recover this GPU", "https://github.com/JosephKJ/OWOD/issues/81"))),
    FloorPattern(
        "numbers.loss_scale", Evidence.NONFINITE, ("loss scale", "loss_scale", "reducing to",
                                                "Grad Scale", "grad scale"),
        # anchored: the greedy ``.*`` (the line's last scale: "Attempted loss scale: 4.0,
        # reducing to 2.0") tried from every offset was quadratic: 3 s on 200 of fairseq's
        # 4,000-character stats lines
        r"^(?i:.*(?:(?P<reducing>reducing (?:loss scale )?to)|(?:loss|grad)[ _]scale(?: to| =|:)?))"
        r"\s*"
        r"(?P<scale>[\d.]+e-?\d+|[\d.]+)\b",
        (("[2021-11-13 19:22:15,963] [INFO] [stage3.py:2731:_overflow_clean_up] [deepscale] "
          "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 4.0, reducing to 2.0",
          "https://github.com/huggingface/transformers/issues/9996"),
         ("Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to "
          "8.165126103939127e-202", "https://github.com/NVIDIA/apex/issues/318"),
         ("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 0.03125, ",
          "https://github.com/whai362/PVT/issues/94")),
        accept=_collapsed),
    FloorPattern(
        "numbers.loss_nan", Evidence.NONFINITE, ("nan", "NaN", "inf"),
        r"(?i:\b\w*loss\w*)['\"]?\s*[:=]?\s*['\"]?(?:tensor\()?(?:nan|-?inf)\b",
        (("lr: 1.819e-04, eta: 2 days, 12:35:35, time: 1.072, det_loss_cls_1: nan, "
          "det_loss_box_1: 0.0000", "https://github.com/swc-17/SparseDrive/issues/27"),
         ("Training: 2021-06-01 16:25:51,183-Speed 218.82 samples/sec   Loss nan   Epoch: 0   "
          "Global Step: 14750", "https://github.com/deepinsight/insightface/issues/1555"))),
    FloorPattern(
        # Python logging's default format at ERROR or CRITICAL ("LEVEL:logger:message"): a
        # program said something failed. None of the development set's 302 healthy runs
        # logs one; every one of the 29 logs that does is a failed job's. Last: any other
        # pattern reads the line first (torchrun's "ERROR:torch.distributed.elastic...").
        "python_logging.error", Evidence.ERROR_RECORD, ("ERROR:", "CRITICAL:"),
        r"^(?:ERROR|CRITICAL):[A-Za-z_][\w.]*:\S",
        (("ERROR:megatron.core.rerun_state_machine:Unexpected result nan on rank 13 at "
          "iteration #2 invokation #1 (message='found NaN in local grad norm for bucket #0 in "
          "backward pass before data-parallel communication collective')",
          "https://github.com/NVIDIA/Megatron-LM/issues/2597"),
         ("ERROR:torch.distributed.elastic.agent.server.local_elastic_agent:[default] Worker "
          "group failed", "https://github.com/s3prl/s3prl/issues/195")),
        accept=lambda d: True),
)

_BY_NEEDLE = NeedleIndex([p.needles for p in PATTERNS])
NEEDLES: tuple[str, ...] = _BY_NEEDLE.needles


def detect(body: str) -> FloorHit | None:
    """The failure evidence ``body`` (one line, rank prefix removed) is, or None."""
    for p in (PATTERNS[i] for i in _BY_NEEDLE.held(body)):
        m = p.regex.search(body)
        if m is None:
            continue
        d = {k: v for k, v in m.groupdict().items() if v is not None}
        if p.accept is not None and not p.accept(d):
            continue
        return _hit(p, d)
    return None


def _signal_of(p: FloorPattern, d: Mapping[str, str | None], code: int | None) -> str | None:
    """The signal a line reports: by name, by number, as a negative exit code, or as a
    shell's 128+N."""
    signal = d.get("sig")
    signum = d.get("signum") or d.get("signum2")
    if signum is not None:
        signal = killed_by(-int(signum)) or f"signal {signum}"
    if code is not None and code < 0:
        signal = killed_by(code) or f"signal {-code}"
    if code is not None and code > 128 and p.name in ("generic.exit_code",):
        signal = killed_by(128 - code)  # a shell's 128+N (137 = SIGKILL)
    return signal


def _hit(p: FloorPattern, d: Mapping[str, str | None]) -> FloorHit:
    code_text = d.get("code") or d.get("code2")
    code = int(code_text) if code_text is not None else None
    signal = _signal_of(p, d, code) or p.implied_signal
    what = d.get("what") or d.get("what2") or ""
    if what in ("abort", "raise"):
        signal = "SIGABRT"
        what = ""
    oom = (p.oom or "Out Of Memory" in what or what == "OUT_OF_MEMORY"
           or d.get("resource") == "memory")
    if what and not signal and not what.startswith("Exited"):
        signal = {"Killed": "SIGKILL", "Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT",
                  "Bus error": "SIGBUS", "Terminated": "SIGTERM"}.get(what.split(" (")[0])
    rank_text, task_text = d.get("rank"), d.get("task")
    rank = int(rank_text) if rank_text is not None else None
    task = int(task_text) if task_text is not None else None
    tasks = _task_list(d.get("tasklist") or "")
    return FloorHit(p.name, p.evidence, code, signal, rank, oom, task,
                    tasks if len(tasks) > 1 else ())
