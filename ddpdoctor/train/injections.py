"""Faults the reference trainer can plant on purpose: ``--inject NAME[@RANK][:STEP]``.

Every fault is planted the way a real bug would cause it, so PyTorch shows it exactly as it
shows the real thing (the same error text, the same hang, the same silent damage). The
trainer calls the Injector (injector.py; the faults are in faults.py) at a few fixed points
(model built, data pipeline built, step start, loss computed, step end); nothing else in
the trainer knows about faults.

Steps count from 1. ``@all`` plants on every rank. Parsing and the catalogue need no torch
(the CLI lists injections without importing it).
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpdoctor.train.host_checks import check_host as check_host  # the CLI's and ranks' entry

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
    needs: str = ""         # a --precision it needs ("fp16": a loss scaler)


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
    InjectionSpec("accum-skew", "from STEP on, RANK splits its batch into --grad-accum + 1 "
                  "micro-batches (it syncs on a later micro-batch than the others)",
                  "nothing: the collectives still pair up (one synchronised backward per "
                  "rank per step); RANK's samples weigh less in the averaged gradient",
                  "silent", "GRAD_ACCUM_OUT_OF_STEP", default_step=1, ddp_only=True),
    InjectionSpec("scaler-overflow", "from STEP on, RANK's backward overflows fp16 at every "
                  "step (a gradient 1e30 times too large; needs --precision fp16)",
                  "nothing but a loss that stops moving: the GradScaler skips every "
                  "optimizer step and halves its scale each time", "silent",
                  "GRAD_NONFINITE", default_step=1, needs="fp16"),
    InjectionSpec("hook-one-rank", "only RANK registers a gradient compression hook (fp16; "
                  "none where --comm-hook is set)",
                  "the first backward: gloo aborts RANK with 'op.preamble.length <= "
                  "op.nbytes. 118656 vs 59328. Received data size doesn't match expected "
                  "size. Is there a distributed collective mismatch in your code?' (the "
                  "fp16 bucket is half the fp32 one)", "error", "HANG_COLLECTIVE_MISMATCH",
                  default_step=1, ddp_only=True),
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


def describe() -> str:
    """The text of ``--inject list``: one line per injection."""
    width = max(len(n) for n in INJECTIONS)
    lines = []
    for s in INJECTIONS.values():
        rank = "all" if s.default_rank == ALL_RANKS else str(s.default_rank)
        lines.append(f"{s.name:<{width}}  [{s.kind}, default @{rank}:{s.default_step}, "
                     f"{s.finding}] {s.summary}")
    return "\n".join(lines)


def check_compatible(injections: list[Injection], strategy: str, world: int,
                     options: tuple[str, ...] = ()) -> None:
    """Raise ValueError when an injection cannot act under ``strategy`` / ``world``;
    ``options``: the trainer options that are on (``fp16`` for --precision fp16)."""
    for inj in injections:
        for rule in _RULES:
            reason = rule(inj, INJECTIONS[inj.name], strategy, world, options)
            if reason:
                raise ValueError(reason)


def _needs_ddp(inj: Injection, s: InjectionSpec, strategy: str, world: int,
               options: tuple[str, ...]) -> str:
    if s.ddp_only and strategy not in ("ddp", "zero1"):
        return (f"--inject {inj.name} needs a DDP strategy (ddp or zero1): it acts on "
                "DistributedDataParallel's gradient reduction")
    return ""


def _needs_option(inj: Injection, s: InjectionSpec, strategy: str, world: int,
                  options: tuple[str, ...]) -> str:
    if s.needs and s.needs not in options:
        return f"--inject {inj.name} needs --precision {s.needs} (a loss scaler to overflow)"
    return ""


def _needs_data_parallel(inj: Injection, s: InjectionSpec, strategy: str, world: int,
                         options: tuple[str, ...]) -> str:
    if s.dp_only and strategy in ("pp", "tp"):
        return f"--inject {inj.name} needs data-parallel input (not {strategy})"
    return ""


def _rank_exists(inj: Injection, s: InjectionSpec, strategy: str, world: int,
                 options: tuple[str, ...]) -> str:
    if inj.rank != ALL_RANKS and inj.rank >= world:
        return f"--inject {inj}: rank {inj.rank} does not exist (world size {world})"
    if inj.name == "p2p-deadlock" and (inj.rank ^ 1) >= world:
        return f"--inject {inj}: needs a peer rank {inj.rank ^ 1}"
    return ""


_RULES = (_needs_ddp, _needs_option, _needs_data_parallel, _rank_exists)


def options_on(precision: str) -> tuple[str, ...]:
    """The ``options`` of :func:`check_compatible` for this run."""
    return ("fp16",) if precision == "fp16" else ()
