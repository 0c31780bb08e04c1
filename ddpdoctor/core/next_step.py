"""The next step: what to do about a report, in one of five words, with the reason.

Every report ends in a verdict a person (or a supervisor deciding whether to restart) can act
on: fix the code, fix the config, drain the node and restart, restart as is (transient), or
raise a timeout. It is decided by the first error finding: its id gives the default
(``DEFAULTS``, one entry per catalog id, a test keeps them in step), and a few rules on its
evidence refine it (``REFINEMENTS``: a SIGKILL is memory, an InfiniBand completion error is
the node, a scheduler's time limit is a timeout). Pure and torch-free: every view calls it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

from ddpdoctor.core.findings import Finding


class Action(str, Enum):
    FIX_CODE = "fix_code"
    FIX_CONFIG = "fix_config"
    DRAIN_NODE = "drain_node"
    RESTART = "restart"
    RAISE_TIMEOUT = "raise_timeout"
    NONE = "none"

    @property
    def says(self) -> str:
        return _SAYS[self]


_SAYS = {
    Action.FIX_CODE: "fix the code",
    Action.FIX_CONFIG: "fix the config",
    Action.DRAIN_NODE: "drain the node and restart",
    Action.RESTART: "restart as is",
    Action.RAISE_TIMEOUT: "raise a timeout",
    Action.NONE: "nothing to do",
}

_C, _K, _D, _R, _T = (Action.FIX_CODE, Action.FIX_CONFIG, Action.DRAIN_NODE, Action.RESTART,
                      Action.RAISE_TIMEOUT)

# The default next step of every finding id, with the reason a person reads.
DEFAULTS: dict[str, tuple[Action, str]] = {
    "ENV_VERSION_MISMATCH": (_K, "install the same torch / CUDA / NCCL on every node"),
    "ENV_SHM_TOO_SMALL": (_K, "give the job a larger /dev/shm (docker --shm-size, or fewer "
                              "DataLoader workers)"),
    "ENV_PORT_IN_USE": (_K, "pick a free MASTER_PORT / --rdzv-endpoint port, or stop the job "
                            "that holds it"),
    "ENV_RENDEZVOUS_UNREACHABLE": (_K, "make MASTER_ADDR / the rendezvous endpoint resolvable "
                                       "and reachable from every node"),
    "ENV_NCCL_CONFIG": (_K, "correct the NCCL_* / GLOO_* settings the finding names"),
    "ENV_VAR_MISMATCH": (_K, "launch every rank with the same environment"),
    "ENV_LIMITS": (_K, "raise the ulimit / fix the CPU affinity the finding names"),
    "GPU_DEVICE_MAPPING": (_K, "launch at most one rank per GPU (--nproc-per-node, "
                               "CUDA_VISIBLE_DEVICES) and map each rank to its own GPU "
                               "(torch.cuda.set_device(LOCAL_RANK) before any CUDA work)"),
    "GPU_HEALTH": (_D, "the GPU or its link is failing: take the node out and restart "
                       "elsewhere"),
    "GPU_MEMORY_OCCUPIED": (_K, "free the GPUs another process holds, or schedule elsewhere"),
    "TOPO_NO_P2P": (_K, "check the topology / P2P settings the finding names"),
    "COMM_CONNECTIVITY": (_K, "fix the network path between the ranks named (interface, "
                              "firewall, NCCL_SOCKET_IFNAME)"),
    "COMM_BANDWIDTH_LOW": (_K, "check the link settings the finding names"),
    "COMM_SLOW_RANK": (_D, "one rank's links are slow: check or drain its node"),
    "DATALOADER_WORKER_FAILURE": (_K, "fewer DataLoader workers, more shared memory, or a "
                                      "worker timeout"),
    "DATALOADER_BOTTLENECK": (_K, "more DataLoader workers or faster storage"),
    "DDP_UNUSED_PARAMETERS": (_C, "make every parameter take part in the loss, or pass "
                                  "find_unused_parameters=True"),
    "DDP_FIND_UNUSED_OVERHEAD": (_K, "drop find_unused_parameters=True"),
    "DDP_REDUCTION_NOT_FINISHED": (_C, "every rank must run the same forward/backward before "
                                       "the next step"),
    "GRAD_NONFINITE": (_K, "lower the learning rate, use bf16 or a gradient clip; find the "
                           "first step that went non-finite"),
    "PARAM_DESYNC": (_C, "the replicas diverged: every rank must load the same state and step "
                         "together"),
    "SAMPLER_MISSING": (_C, "use a DistributedSampler"),
    "SAMPLER_EPOCH_NOT_SET": (_C, "call sampler.set_epoch(epoch) every epoch"),
    "STRAGGLER": (_D, "one rank is consistently slow: check its node"),
    "MEMORY_GROWTH": (_C, "something keeps references across steps (losses, outputs)"),
    "OOM": (_K, "smaller batch, activation checkpointing, or a sharded strategy "
                "(ddpdoctor plan)"),
    "HANG_RANK_MISSING_COLLECTIVE": (_C, "the culprit rank skipped a collective the others "
                                         "entered: make every rank call it"),
    "HANG_COLLECTIVE_MISMATCH": (_C, "ranks called different collectives: make the calls "
                                     "the same on every rank"),
    "HANG_P2P_DEADLOCK": (_C, "order the sends and receives so they pair up"),
    "HANG_DATALOADER": (_C, "the culprit rank is stuck loading data: fix the loader or give "
                            "it a timeout"),
    "RANK_CRASHED": (_C, "the culprit rank crashed: fix the error it raised"),
    "RANK_UNRESPONSIVE": (_R, "a rank stopped answering at start-up: restart, and drain its "
                              "node if it happens again"),
    "COLLECTIVE_TIMEOUT": (_T, "no rank is named as the culprit: if the job was slow rather "
                               "than stuck, raise the timeout; else `ddpdoctor attach` the "
                               "next hang to name the stuck rank"),
    "UNRECOGNIZED_FAILURE": (_C, "read the quoted error: it is the job's own"),
    "KNOWN_UPSTREAM_BUG": (_K, "upgrade or downgrade the component the bug is fixed in"),
    "GRAD_ACCUM_OUT_OF_STEP": (_C, "run the same number of micro-batches per step on every "
                                   "rank"),
    "SCALING_COMM_BOUND": (_K, "overlap or compress communication, or a larger batch"),
    "SCALING_COMPUTE_BOUND": (_K, "one GPU (or core set) per rank"),
    "SCALING_INEFFICIENT": (_K, "profile a step at each size"),
    "DS_CONFIG_INVALID": (_K, "correct the DeepSpeed config settings the finding names"),
}


def _text(f: Finding) -> str:
    ev = f.evidence
    parts: list[object] = [f.title, ev.get("signal"), ev.get("lines"), ev.get("root_line")]
    return " ".join(str(p) for p in parts if p)


def _has(pattern: str) -> Callable[[Finding], bool]:
    rx = re.compile(pattern)
    return lambda f: bool(rx.search(_text(f)))


# A program refusing its configuration before it trains: raised while validating its
# arguments or config, or saying which version or which divisibility it needs, or which
# launcher variable is missing. What fixes it is the launch, not the code.
_CONFIG_WHERE = re.compile(r"(?:arguments|\w*_?args|config\w*)\.py:\d+|in (?:validate_"
                           r"args|_?validate\w*|check_args|parse_args|__post_init__)$")
_CONFIG_SAYS = re.compile(
    r"requires (?:PyTorch|torch|transformers|accelerate|deepspeed|CUDA|Python)\b[^.;]*?"
    r"(?:>=|version|or (?:newer|later|higher))|is not divisible by|must be divisible by|"
    r"KeyError: '(?:RANK|LOCAL_RANK|WORLD_SIZE|MASTER_ADDR|MASTER_PORT)'|"
    r"ImportError: cannot import name '\w+' from '(?:torch|transformers|accelerate|deepspeed|"
    r"peft|trl|flash_attn)\b|"
    # a package the environment lacks (a top-level name: a dotted one is the project's own
    # module, which the code names wrongly)
    r"ModuleNotFoundError: No module named '\w+'|"
    # the installed torch (or an extension) was built without kernels for this GPU
    r"no kernel image is available for execution on the device|"
    # a checkpoint that is another run's: its optimizer groups or its recorded settings
    # disagree with this run's (resumed from the wrong directory, or the config changed)
    r"loaded state dict (?:has a different number of parameter groups|contains a parameter "
    r"group)|and checkpoint ?value \S+ for .+ do not match")


def _config_refused(f: Finding) -> bool:
    where = str(f.evidence.get("where") or "")
    said = f"{f.title} {f.evidence.get('exception') or ''}"
    return bool(_CONFIG_WHERE.search(where) or _CONFIG_SAYS.search(said))


# (finding id or "*", test on the finding, action, reason): the first that holds wins.
REFINEMENTS: tuple[tuple[str, Callable[[Finding], bool], Action, str], ...] = (
    ("*", _has(r"DUE TO TIME LIMIT"), _T,
     "the scheduler stopped the job at its time limit: ask for more time, or checkpoint "
     "and resume"),
    ("*", _has(r"DUE TO NODE FAILURE"), _D, "the scheduler lost the node: restart elsewhere"),
    ("*", _has(r"DUE TO PREEMPTION"), _R, "the job was preempted: restart as is"),
    ("COMM_CONNECTIVITY", _has(r"(?i)async event|catastrophic|port error|port state"),
     _D, "the InfiniBand adapter itself reported an error: drain the node"),
    ("COMM_CONNECTIVITY", lambda f: f.evidence.get("family") == "node_network", _D,
     "only one node's ranks could not bring up the network the others did: drain that "
     "node and restart"),
    # before the missing-path rule: a sample the Dataset could not read is not the launch
    ("RANK_CRASHED", lambda f: f.evidence.get("family") == "dataset_code", _C,
     "the Dataset's own code raised on a sample in a DataLoader worker: fix that code, or "
     "skip or repair the samples it cannot read"),
    ("*", _has(r"No such file or directory|command not found|can't open file|execve|"
               r"FileNotFoundError|[Dd]oes not exist|[Ff]ile \S+ not found|"
               r"IsADirectoryError|NotADirectoryError|"
               r"[Ff]ile not found|No space left on device|Disk quota exceeded|"
               # torch.save's zip writer short of the bytes it wrote: a full disk or quota
               r"unexpected pos \d+ vs \d+|"
               r"Permission denied"), _K,
     "a path, a program or the disk the launch relies on is missing or full: fix the launch "
     "configuration (paths, installed programs, free space)"),
    ("HANG_RANK_MISSING_COLLECTIVE", lambda f: f.evidence.get("family") == "rank_census", _K,
     "ranks of the world never started, or several processes took one rank: the launch "
     "does not start one process per rank (srun and its task count, the launcher's "
     "--nnodes / --node-rank on every node)"),
    ("HANG_RANK_MISSING_COLLECTIVE", lambda f: bool(f.evidence.get("busy")), _T,
     "the rank the others waited for was busy with real work (preprocessing, saving, "
     "evaluating): raise the collective timeout, or do that work before the process group "
     "starts"),
    ("RANK_CRASHED", lambda f: f.evidence.get("family") == "command_line"
     and bool(re.search(r"--local[-_]rank", str(f.evidence.get("message", "")))), _C,
     "the script's argument parser refused what the launcher passed: accept it (--local_rank "
     "/ --local-rank) or launch with torchrun"),
    ("RANK_CRASHED", lambda f: f.evidence.get("family") == "command_line", _K,
     "the script's argument parser refused the command line it was given: fix the launch "
     "command's arguments"),
    ("RANK_CRASHED", lambda f: f.evidence.get("family") == "extension_build", _K,
     "a C++/CUDA extension did not compile: fix the toolchain (compiler version, CUDA_HOME, "
     "headers) or install the op prebuilt"),
    ("RANK_CRASHED", _config_refused, _K,
     "the program refused its configuration (an argument or config check, a version it "
     "needs, a package it imports, a size that must divide, a launcher variable): fix the "
     "launch or its environment, not the code"),
    ("RANK_CRASHED", lambda f: f.evidence.get("signal") == "SIGKILL", _K,
     "a SIGKILL with no error of its own is most often the host running out of memory: "
     "lower host memory use or raise the limit"),
    ("RANK_CRASHED", _has(r"(?i)Xid|ECC|fallen off the bus|uncorrectable"), _D,
     "the crash comes with a hardware error: drain the node"),
    ("GPU_MEMORY_OCCUPIED", lambda f: f.evidence.get("family") == "device_held", _R,
     "a process of an earlier run still holds the device: stop it, then restart as is"),
    ("DATALOADER_WORKER_FAILURE", _has(r"(?i)can't pickle|cannot pickle|PicklingError"), _C,
     "the Dataset (or its collate_fn / sampler) holds an object the workers cannot be sent "
     "(a lambda or local function): make it picklable, a module-level function"),
    ("DATALOADER_WORKER_FAILURE", lambda f: f.evidence.get("family") == "worker_code", _C,
     "the Dataset's own code raised in a worker: fix the dataset code or the sample it "
     "read"),
    ("ENV_NCCL_CONFIG", lambda f: f.evidence.get("family") == "family_backend", _K,
     "this torch build lacks the backend the code asks for: ask for one it has (gloo on "
     "Windows, macOS or CPU) or install a build with it"),
    ("UNRECOGNIZED_FAILURE", lambda f: f.evidence.get("family") == "launch_command", _K,
     "the launcher refused its own command line before starting any rank: fix the launch "
     "command (an unset variable it expands, a misspelt option)"),
    ("UNRECOGNIZED_FAILURE", lambda f: f.evidence.get("family") == "allocation_refused", _K,
     "the scheduler refused the request: ask for what its policy allows (a time limit, a "
     "partition, an account, a size)"),
    ("UNRECOGNIZED_FAILURE", lambda f: f.evidence.get("family") == "own_exit", _R,
     "the program ended the run itself on a condition it checks (a time budget, a speed "
     "gate, data used up): read its output for the condition, then run it again (from its "
     "last checkpoint) or change what it checks"),
    ("UNRECOGNIZED_FAILURE", lambda f: f.evidence.get("stopped_by") == "SIGHUP", _K,
     "the terminal or session that started the job closed and took it down: start it where "
     "that cannot reach it (nohup, tmux, screen, setsid, or the scheduler), from its last "
     "checkpoint"),
    ("UNRECOGNIZED_FAILURE", lambda f: bool(f.evidence.get("stopped_by")), _R,
     "the job was stopped from outside, not broken: run it again (from its last checkpoint)"),
)


@dataclass(frozen=True)
class NextStep:
    action: Action
    reason: str
    finding: str = ""  # the finding id it was decided from

    def to_dict(self) -> dict[str, str]:
        return {"do": self.action.value, "says": self.action.says, "why": self.reason,
                "finding": self.finding}


def decide(findings: Iterable[Finding], doctor_error: str = "") -> NextStep:
    """The next step for a report's findings (in report order, root cause first)."""
    if doctor_error:
        return NextStep(Action.NONE, "ddpdoctor itself could not finish: see its reason")
    errors = [f for f in findings if f.severity == "error"]
    if not errors:
        return NextStep(Action.NONE, "no error finding")
    first = errors[0]
    for fid, test, action, reason in REFINEMENTS:
        if fid in ("*", first.id) and test(first):
            return NextStep(action, reason, first.id)
    action, reason = DEFAULTS.get(first.id, (Action.FIX_CODE, "see the finding's playbook"))
    return NextStep(action, reason, first.id)
