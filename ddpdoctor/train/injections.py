"""Faults the reference trainer can plant on purpose: ``--inject NAME[@RANK][:STEP]``.

Every fault is planted the way a real bug would cause it, so PyTorch shows it exactly as it
shows the real thing (the same error text, the same hang, the same silent damage). The
trainer calls the :class:`Injector` at a few fixed points (model built, data pipeline
built, step start, loss computed, step end); nothing else in the trainer knows about faults.

Steps count from 1. ``@all`` plants on every rank. Parsing and the catalogue need no torch
(the CLI lists injections without importing it).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ALL_RANKS = -1
SLOW_LINK_RATE = "100mbit"


@dataclass(frozen=True)
class InjectionSpec:
    name: str
    summary: str            # one line for `--inject list`
    shows: str              # what plain PyTorch shows (the symptom the doctor must catch)
    kind: str               # "error" | "hang" | "silent"
    finding: str            # the catalog finding id the fault should produce
    default_rank: int = 1   # ALL_RANKS for every rank
    default_step: int = 2
    ddp_only: bool = False  # needs a DistributedDataParallel strategy (ddp, zero1)
    dp_only: bool = False   # needs a data-parallel input pipeline (not pp / tp)


INJECTIONS: dict[str, InjectionSpec] = {s.name: s for s in [
    InjectionSpec("unused-param",
                  "a submodule that forward never uses (every rank; RANK is ignored)",
                  "2nd forward: RuntimeError 'Expected to have finished reduction in the prior "
                  "iteration ...' (find_unused_parameters=False)", "error",
                  "DDP_UNUSED_PARAMETERS", default_rank=ALL_RANKS, ddp_only=True),
    InjectionSpec("unused-branch", "from STEP on, forward skips the last block's MLP "
                  "(a data-dependent branch)",
                  "the next forward: 'Expected to have finished reduction in the prior "
                  "iteration ...' naming the skipped parameters", "error",
                  "DDP_REDUCTION_NOT_FINISHED", ddp_only=True),
    InjectionSpec("nan", "the loss becomes NaN on RANK at STEP",
                  "loss NaN on RANK at STEP; after the gradient all-reduce every rank's "
                  "parameters are NaN", "silent", "GRAD_NONFINITE"),
    InjectionSpec("desync", "at STEP, RANK's parameters are perturbed (1e-3 noise)",
                  "replicas silently differ from STEP on (parameter checksums diverge)",
                  "silent", "PARAM_DESYNC"),
    InjectionSpec("no-sampler", "DataLoader without DistributedSampler (same seed everywhere)",
                  "every rank trains on the same samples: per-rank losses are identical",
                  "silent", "SAMPLER_MISSING", default_rank=ALL_RANKS, default_step=1,
                  dp_only=True),
    InjectionSpec("no-set-epoch", "DistributedSampler.set_epoch is never called",
                  "every epoch repeats the first epoch's sample order", "silent",
                  "SAMPLER_EPOCH_NOT_SET", default_rank=ALL_RANKS, default_step=1,
                  dp_only=True),
    InjectionSpec("straggler", "RANK sleeps 0.3 s in forward at every step from STEP on",
                  "all ranks' steps slow down; RANK's compute time is 0.3 s longer", "silent",
                  "STRAGGLER", default_step=1),
    InjectionSpec("slow-data", "RANK's Dataset.__getitem__ sleeps 0.05 s per sample from "
                  "STEP on", "all ranks' steps slow down; RANK waits for its data",
                  "silent", "DATALOADER_BOTTLENECK", default_step=1),
    InjectionSpec("data-stall", "RANK's Dataset.__getitem__ sleeps forever at STEP",
                  "hang: RANK stuck in __getitem__ (_stall_forever), the others wait in a "
                  "collective", "hang", "HANG_DATALOADER"),
    InjectionSpec("worker-kill", "a DataLoader worker of RANK is SIGKILLed at STEP "
                  "(forces --num-workers >= 1)",
                  "RuntimeError 'DataLoader worker (pid(s) N) exited unexpectedly' "
                  "(killed by signal: Killed.)", "error", "DATALOADER_WORKER_FAILURE"),
    InjectionSpec("worker-bus", "a DataLoader worker of RANK gets SIGBUS at STEP (like shm "
                  "exhaustion; forces --num-workers >= 1)",
                  "'ERROR: Unexpected bus error encountered in worker' then 'DataLoader "
                  "worker ... is killed by signal: Bus error'", "error",
                  "DATALOADER_WORKER_FAILURE"),
    InjectionSpec("crash", "RANK raises RuntimeError at STEP",
                  "RuntimeError 'ddpdoctor injected crash: rank R at step S'; torchrun "
                  "tears the other ranks down", "error", "RANK_CRASHED"),
    InjectionSpec("oom", "RANK asks for more memory than the host (CPU) or its GPU has, in "
                  "the forward of STEP",
                  "RuntimeError '... DefaultCPUAllocator: can't allocate memory: you tried to "
                  "allocate N bytes' (CPU) / torch.OutOfMemoryError 'CUDA out of memory. "
                  "Tried to allocate ...' (GPU)", "error", "OOM"),
    InjectionSpec("oom-kill", "RANK is SIGKILLed at STEP (like the host OOM killer)",
                  "torchrun: 'Signal 9 (SIGKILL) received by PID'", "error", "OOM"),
    InjectionSpec("lone-collective", "at the end of STEP, RANK alone all-reduces on a side "
                  "group (a rank-conditional collective)",
                  "hang: RANK waits in all_reduce (_lone_all_reduce) that no other rank "
                  "enters; the others wait in the next step's collective", "hang",
                  "HANG_RANK_MISSING_COLLECTIVE"),
    InjectionSpec("collective-order", "at the end of STEP, RANK broadcasts where the others "
                  "all-reduce (_sync_metrics)",
                  "hang until the process-group timeout (gloo); TORCH_DISTRIBUTED_DEBUG=DETAIL"
                  " reports 'Detected mismatch between collectives on ranks'", "hang",
                  "HANG_COLLECTIVE_MISMATCH"),
    InjectionSpec("p2p-deadlock", "at the end of STEP, RANK and its peer (RANK xor 1) both "
                  "recv before they send",
                  "hang: both ranks wait in recv (_exchange_with_peer)", "hang",
                  "HANG_P2P_DEADLOCK"),
    InjectionSpec("slow-link", "from STEP on, RANK's network egress is throttled to "
                  f"{SLOW_LINK_RATE} (tc tbf on GLOO_SOCKET_IFNAME; needs root and the rank "
                  "in a network namespace of its own)",
                  "every collective slows down on every rank; nothing in the output says "
                  "which link", "silent", "COMM_SLOW_RANK"),
    InjectionSpec("leak", "from STEP on, RANK keeps 16 MB of tensors and the loss graph "
                  "every step", "RANK's RSS grows by >= 16 MB per step", "silent",
                  "MEMORY_GROWTH", default_step=1),
    InjectionSpec("hang-compute", "RANK sleeps forever inside the model's forward at STEP",
                  "hang: RANK in forward (_compute_forever), the others wait in a collective",
                  "hang", "HANG_RANK_MISSING_COLLECTIVE"),
]}

STRAGGLER_DELAY_S = 0.3
SLOW_DATA_PER_SAMPLE_S = 0.05
LEAK_BYTES_PER_STEP = 16 << 20
DESYNC_NOISE = 1e-3


@dataclass(frozen=True)
class Injection:
    name: str
    rank: int   # ALL_RANKS for every rank
    step: int

    def on(self, rank: int) -> bool:
        return self.rank in (ALL_RANKS, rank)

    def __str__(self) -> str:
        rank = "all" if self.rank == ALL_RANKS else str(self.rank)
        return f"{self.name}@{rank}:{self.step}"


def parse(spec: str) -> Injection:
    """``NAME[@RANK|@all][:STEP]`` -> Injection; ValueError with a one-line reason."""
    text = spec.strip()
    step_text = rank_text = None
    if ":" in text:
        text, step_text = text.rsplit(":", 1)
    if "@" in text:
        text, rank_text = text.split("@", 1)
    name = text.strip()
    if name not in INJECTIONS:
        raise ValueError(f"unknown injection {name!r} in {spec!r}; `--inject list` shows them")
    s = INJECTIONS[name]
    try:
        if rank_text is None or rank_text == "":
            rank = s.default_rank
        elif rank_text.lower() in ("all", "*"):
            rank = ALL_RANKS
        else:
            rank = int(rank_text)
            if rank < 0:  # -1 is ALL_RANKS inside; on the command line it is a typo
                raise ValueError
        step = s.default_step if step_text in (None, "") else int(step_text)
    except ValueError:
        raise ValueError(f"bad injection {spec!r}: expected NAME[@RANK|@all][:STEP] with "
                         f"RANK >= 0, e.g. nan@1:3") from None
    if rank < ALL_RANKS or step < 1:
        raise ValueError(f"bad injection {spec!r}: rank must be >= 0 (or 'all'), step >= 1")
    return Injection(name, rank, step)


def parse_all(specs: list[str] | tuple[str, ...]) -> list[Injection]:
    return [parse(s) for s in specs]


def check_steps(injections: list[Injection], steps: int) -> None:
    """Raise ValueError for an injection due after the last step: it would never fire and
    the run would look like a clean one."""
    for inj in injections:
        if inj.step > steps:
            raise ValueError(f"--inject {inj}: step {inj.step} is after the last step "
                             f"(--steps {steps}); it would never fire")


def check_host(injections: list[Injection], rank: int, device_type: str = "cpu",
               env: dict[str, str] | None = None) -> None:
    """Raise ValueError when this rank cannot plant a fault that touches the host.

    ``slow-link`` rewrites a network interface's queueing: only allowed inside a named
    network namespace (``ip netns add``, as tests make), never in the host's. ``oom`` on
    CPU needs the kernel to refuse a huge allocation, which it does unless overcommit is
    "always" (vm.overcommit_memory=1): then the memory would really be used.
    """
    oom = next((i for i in injections if i.name == "oom" and i.on(rank)), None)
    if oom is not None and device_type == "cpu" and _overcommit_mode() == 1:
        raise ValueError(f"--inject {oom}: vm.overcommit_memory is 1 (always), so the "
                         "kernel would grant the allocation instead of failing it")
    inj = next((i for i in injections if i.name == "slow-link" and i.on(rank)), None)
    if inj is None:
        return
    env = os.environ if env is None else env
    dev = env.get("GLOO_SOCKET_IFNAME", "")
    if not dev or "," in dev or dev == "lo":
        raise ValueError(f"--inject {inj}: set GLOO_SOCKET_IFNAME to the one interface "
                         "(not lo) whose egress to throttle")
    if os.geteuid() != 0:
        raise ValueError(f"--inject {inj}: needs root (tc qdisc)")
    if named_netns() is None:
        raise ValueError(f"--inject {inj}: refusing to throttle the host's network; run "
                         "this rank in a network namespace of its own (ip netns exec)")


def _overcommit_mode() -> int | None:
    try:
        with open("/proc/sys/vm/overcommit_memory") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def named_netns() -> str | None:
    """The ``ip netns`` name of this process's network namespace; None for the host's
    (even when ``ip netns attach`` named it) or when it cannot be told."""
    try:
        mine = os.stat("/proc/self/ns/net")
        try:
            host = os.stat("/proc/1/ns/net")  # unreadable in some sandboxes
            if (host.st_dev, host.st_ino) == (mine.st_dev, mine.st_ino):
                return None  # `ip netns attach NAME 1` names the host's own namespace
        except OSError:
            pass
        for name in os.listdir("/run/netns"):
            st = os.stat(os.path.join("/run/netns", name))
            if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
                return name
    except OSError:
        pass
    return None


def describe() -> str:
    """The text of ``--inject list``: one line per injection."""
    width = max(len(n) for n in INJECTIONS)
    lines = []
    for s in INJECTIONS.values():
        rank = "all" if s.default_rank == ALL_RANKS else str(s.default_rank)
        lines.append(f"{s.name:<{width}}  [{s.kind}, default @{rank}:{s.default_step}, "
                     f"{s.finding}] {s.summary}")
    return "\n".join(lines)


def check_compatible(injections: list[Injection], strategy: str, world: int) -> None:
    """Raise ValueError when an injection cannot act under ``strategy`` / ``world``."""
    for inj in injections:
        s = INJECTIONS[inj.name]
        if s.ddp_only and strategy not in ("ddp", "zero1"):
            raise ValueError(f"--inject {inj.name} needs a DDP strategy (ddp or zero1): the "
                             f"reduction check it trips is DistributedDataParallel's")
        if s.dp_only and strategy in ("pp", "tp"):
            raise ValueError(f"--inject {inj.name} needs data-parallel input (not {strategy})")
        if inj.rank != ALL_RANKS and inj.rank >= world:
            raise ValueError(f"--inject {inj}: rank {inj.rank} does not exist "
                             f"(world size {world})")
        if inj.name == "p2p-deadlock" and (inj.rank ^ 1) >= world:
            raise ValueError(f"--inject {inj}: needs a peer rank {inj.rank ^ 1}")


# ---- the faults themselves. Function names are what a stack dump of the stuck rank shows.

def _stall_forever() -> None:
    while True:
        time.sleep(1)


def _compute_forever() -> None:
    while True:
        time.sleep(1)


def _straggle(seconds: float) -> None:
    time.sleep(seconds)


def _allocate_activations(device: Any) -> None:
    """One allocation larger than the device: the allocator's own out-of-memory error.

    On CPU, 4x the host's RAM + swap: beyond what the kernel's overcommit heuristic grants
    (check_host refuses where overcommit is "always", as nothing would fail then).
    """
    import torch

    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
    else:
        import psutil

        total = psutil.virtual_memory().total + psutil.swap_memory().total
    torch.empty(4 * total, dtype=torch.uint8, device=device)


def _throttle_egress(dev: str, rate: str) -> None:
    import subprocess

    r = subprocess.run(["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
                        "burst", "32kbit", "latency", "400ms"], capture_output=True, text=True,
                       timeout=30)
    if r.returncode:
        raise RuntimeError(f"tc could not throttle {dev}: {r.stderr.strip()}")


class Injector:
    """Plants this run's faults on this rank at the trainer's hook points."""

    def __init__(self, injections: list[Injection], rank: int, world: int) -> None:
        self.injections = injections
        self.rank = rank
        self.world = world
        self.step = 0
        self._leak: list[Any] = []
        self._side_group: Any = None

    def _get(self, name: str) -> Injection | None:
        for inj in self.injections:
            if inj.name == name:
                return inj
        return None

    def _due(self, name: str, from_step: bool = False) -> Injection | None:
        """The injection if it acts on this rank at the current step."""
        inj = self._get(name)
        if inj is None or not inj.on(self.rank):
            return None
        hit = self.step >= inj.step if from_step else self.step == inj.step
        return inj if hit else None

    # -- set-up hooks

    def setup(self) -> None:
        """Collective set-up every rank must do alike (call right after init)."""
        if self._get("lone-collective"):
            import torch.distributed as dist

            # A side group made on every rank; only the culprit ever uses it.
            self._side_group = dist.new_group(backend=dist.get_backend())

    @property
    def use_sampler(self) -> bool:
        return self._get("no-sampler") is None

    @property
    def call_set_epoch(self) -> bool:
        return self._get("no-set-epoch") is None

    def num_workers(self, requested: int) -> int:
        if self._get("worker-kill") or self._get("worker-bus"):
            return max(1, requested)
        return requested

    def model_built(self, model: Any) -> None:
        """Change the bare model before any wrapping (unused modules, forward hooks)."""
        from torch import nn

        if self._get("unused-param"):
            # on every rank: DDP requires the same parameters everywhere
            model.unused_head = nn.Linear(model.cfg.dim, model.cfg.vocab)
        if self._get("unused-branch") and model.blocks:
            block = list(model.blocks.values())[-1]
            plain = type(block).forward
            injector = self

            def forward(x: Any) -> Any:
                if injector._due("unused-branch", from_step=True):
                    # the data-dependent branch: this batch "takes the other path"
                    return x + block.attn(block.ln1(x))
                return plain(block, x)

            block.forward = forward
        if self._get("straggler") or self._get("hang-compute") or self._get("oom"):
            model.register_forward_pre_hook(self._forward_faults)

    def _forward_faults(self, module: Any, args: Any) -> None:
        if self._due("hang-compute"):
            _compute_forever()
        if self._due("oom"):
            _allocate_activations(next(module.parameters()).device)
        if self._due("straggler", from_step=True):
            _straggle(STRAGGLER_DELAY_S)

    def dataset_fault(self, batches_of_step: Callable[[int], list[int]],
                      steps_per_epoch: int) -> Callable[[int, int], None] | None:
        """A per-sample hook for the Dataset (runs in DataLoader workers too)."""
        for name in ("data-stall", "worker-kill", "worker-bus"):
            inj = self._get(name)
            if inj and inj.on(self.rank):
                epoch = (inj.step - 1) // steps_per_epoch
                first = batches_of_step(inj.step)[0]
                return _DataFault(name, epoch, first)
        inj = self._get("slow-data")
        if inj and inj.on(self.rank):
            return _SlowData((inj.step - 1) // steps_per_epoch)
        return None

    # -- per-step hooks

    def step_begin(self, step: int, params: Callable[[], Any]) -> None:
        self.step = step
        if self._due("crash"):
            raise RuntimeError(f"ddpdoctor injected crash: rank {self.rank} at step {step}")
        if self._due("oom-kill"):
            os.kill(os.getpid(), signal.SIGKILL)
        if self._due("slow-link"):
            _throttle_egress(os.environ["GLOO_SOCKET_IFNAME"], SLOW_LINK_RATE)
        if self._due("desync"):
            import torch

            with torch.no_grad():
                gen = torch.Generator().manual_seed(1234 + self.rank)
                for p in params():
                    local = getattr(p, "_local_tensor", p)
                    noise = torch.randn(local.shape, generator=gen, dtype=local.dtype)
                    local.add_(DESYNC_NOISE * noise.to(local.device))

    def loss(self, loss: Any) -> Any:
        if self._due("nan"):
            return loss * float("nan")
        if self._due("leak", from_step=True):
            import torch

            self._leak.append(torch.ones(LEAK_BYTES_PER_STEP // 4))
            self._leak.append(loss)  # keeps this step's autograd graph alive
        return loss

    def step_end(self, device: Any) -> None:
        import torch

        if self._due("lone-collective"):
            _lone_all_reduce(torch.ones(1, device=device), self._side_group)
        if (inj := self._get("collective-order")) and self.step == inj.step:
            _sync_metrics(torch.ones(4, device=device), culprit=inj.on(self.rank))
        if (inj := self._get("p2p-deadlock")) and self.step == inj.step:
            pair = {inj.rank, inj.rank ^ 1} if inj.rank != ALL_RANKS else {self.rank}
            if self.rank in pair:
                _exchange_with_peer(torch.ones(4, device=device), self.rank ^ 1)


class _DataFault:
    """Picklable (DataLoader workers get a copy): acts when the sample of STEP is fetched."""

    def __init__(self, name: str, epoch: int, index: int) -> None:
        self.name, self.epoch, self.index = name, epoch, index

    def __call__(self, epoch: int, index: int) -> None:
        if epoch != self.epoch or index != self.index:
            return
        if self.name == "data-stall":
            _stall_forever()
        elif self.name == "worker-kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.name == "worker-bus":
            os.kill(os.getpid(), signal.SIGBUS)


class _SlowData:
    """Picklable: every sample from the epoch of STEP on takes a while to load."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def __call__(self, epoch: int, index: int) -> None:
        if epoch >= self.epoch:
            time.sleep(SLOW_DATA_PER_SAMPLE_S)


def _lone_all_reduce(t: Any, group: Any) -> None:
    import torch.distributed as dist

    dist.all_reduce(t, group=group)


def _sync_metrics(t: Any, culprit: bool) -> None:
    import torch.distributed as dist

    if culprit:
        dist.broadcast(t, src=0)
    else:
        dist.all_reduce(t)


def _exchange_with_peer(t: Any, peer: int) -> None:
    import torch.distributed as dist

    buf = t.clone()
    dist.recv(buf, src=peer)  # both sides receive first: neither ever sends
    dist.send(t, dst=peer)
