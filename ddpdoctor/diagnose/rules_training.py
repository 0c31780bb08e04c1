"""Triage rules for what the training code did: DDP graphs, DataLoader workers, memory, NaN."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypedDict

from ddpdoctor.core.findings import format_ranks
from ddpdoctor.diagnose.events import Event
from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.index import (
    EventIndex,
    Rule,
    Verdict,
    cut,
    on_rank,
    rank_or,
    ranks_of,
    verdict,
)
from ddpdoctor.diagnose.kb.process import size_bytes
from ddpdoctor.diagnose.launches import went_on_after
from ddpdoctor.diagnose.rules_dataloader import RULE as DATALOADER


def ddp(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    red = ix.of(K.DDP_REDUCTION)
    out = [_reduction_not_finished(ix, red)] if red else []
    unused = _unused_parameters(ix, red)
    return out + ([unused] if unused else [])


def _reduction_not_finished(ix: EventIndex, red: list[Event]) -> Verdict:
    ev: dict[str, object] = {}
    if any(e.data.get("static_graph") for e in red):
        ev["note"] = "static_graph=True and the graph changed between iterations"
    if any(e.data.get("marked_twice") for e in red):
        ev["note"] = ("a parameter got two gradients in one iteration: it is used twice "
                      "(reentrant checkpointing, shared weights, two forwards per backward)")
        title = f"DDP marked a parameter ready twice{on_rank(red)}"
    else:
        title = (f"DDP reduction did not finish{on_rank(red)}: some parameters "
                 "got no gradient in the previous iteration")
    return verdict(ix, "DDP_REDUCTION_NOT_FINISHED", title, red, ev)


def _unused_parameters(ix: EventIndex, red: list[Event]) -> Verdict | None:
    unused = ix.of(K.UNUSED_NAMES, K.UNUSED_INDICES)
    # The reduction error's own text names the cause: "your module has parameters that were
    # not used in producing loss" (not so with static_graph or find_unused_parameters=True).
    framework = ix.of(K.UNUSED_FRAMEWORK) + [e for e in red if _says_unused(e.text)
                                             and not e.data.get("marked_twice")]
    if not unused and not framework:
        return None
    per_rank = _unused_per_rank(unused)
    names = sorted({n for s in per_rank.values() for n in s.get("names", [])})
    idx = sorted({i for s in per_rank.values() for i in s.get("indices", [])})
    ev: dict[str, object] = {"parameters": per_rank} if per_rank else {}
    if names:
        what = ", ".join(names)
    elif idx:
        what = "indices " + " ".join(map(str, idx))
    else:
        what = "(names not printed)"
    if not names:
        ev["hint"] = ("set TORCH_DISTRIBUTED_DEBUG=INFO to have DDP print the parameter "
                      "names")
    ranks = [int(r) for r in per_rank if r != "None"] or ranks_of(framework)
    return verdict(ix, "DDP_UNUSED_PARAMETERS", f"parameters that received no gradient: {what}",
                   unused + framework, ev, ranks=ranks)


class _Unused(TypedDict, total=False):
    names: list[str]
    indices: list[int]


def _unused_per_rank(unused: list[Event]) -> dict[str, _Unused]:
    """The names or indices DDP printed, per rank that printed them."""
    per_rank: dict[str, _Unused] = {}
    for e in unused:
        slot = per_rank.setdefault(str(e.data.get("param_rank", e.rank)), {})
        if "names" in e.data:
            slot["names"] = e.texts("names")
        if "indices" in e.data:
            slot["indices"] = e.ints("indices")
    return per_rank


def _says_unused(text: str) -> bool:
    # Every wording but these two goes on "...your module has parameters that were not
    # used in producing loss" (a pasted log may wrap that part onto the next line).
    return "static_graph" not in text and "is enabled" not in text


def shm(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """/dev/shm ran out or is not writable: DataLoader bus errors, torch's and NCCL's shm."""
    bus = [e for e in ix.of(K.DL_KILLED) if "bus" in e.get_str("signal").lower()]
    bus_worker = [e for e in ix.of(K.DL_WORKER_SIGNAL) if e.data.get("what") == "bus error"]
    torch_shm = ix.of(K.SHM_ALLOC)
    nccl = ix.of(K.NCCL_SHM)
    evs = bus + bus_worker + torch_shm + nccl
    if not evs:
        return []
    ev: dict[str, object] = {}
    if torch_shm:
        ev["shm_error"] = torch_shm[0].data.get("reason", "")
    if bus or bus_worker:
        ev["signal"] = "SIGBUS (Bus error) in a DataLoader worker"
    title = "shared memory (/dev/shm) ran out"
    if nccl:
        title = _nccl_shm_title(nccl, ev)
    elif bus or bus_worker:
        title += " — DataLoader worker died of a bus error"
    return [verdict(ix, "ENV_SHM_TOO_SMALL", title, evs, ev,
                    ranks=ranks_of(bus + torch_shm + nccl) or None)]


def _nccl_shm_title(nccl: list[Event], ev: dict[str, object]) -> str:
    """NCCL's own shm failure: which call, which segment, and why (adds them to ``ev``)."""
    calls = [e.data for e in nccl if e.data.get("call")]
    seg = next((e.data for e in nccl if e.data.get("segment")), {})
    reason = next((str(d["reason"]) for d in calls + [seg] if d.get("reason")), "")
    ev.update({k: v for k, v in seg.items() if k in ("segment", "size")})
    if calls:
        ev["failed_call"] = f"{calls[0]['call']}: {calls[0].get('reason', '')}"
    what = "is not writable" if "ermission" in reason else "is too small"
    size = f" ({seg['size']} bytes)" if seg.get("size") else ""
    return (f"NCCL could not create its shared memory segment{size}: /dev/shm {what}"
            + (f" ({reason})" if reason else ""))


def oom(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    cuda, cpu = ix.of(K.CUDA_OOM), ix.of(K.CPU_OOM)
    # A DataLoader worker SIGKILLed with no memory evidence is said as what was seen
    # (DATALOADER_WORKER_FAILURE, the host's OOM killer named as the usual sender): the
    # threads of such logs as often found a worker count or batch to fix as a host to
    # give memory. The kernel's own OOM line below is evidence, and makes it OOM.
    out = _cuda_oom(ix, cuda) + _allocator_oom(ix, cpu)
    host = ix.of(K.HOST_OOM)
    if host:
        killed9 = [e for e in ix.root_failures if e.data.get("exit_code") == -9]
        ev: dict[str, object] = {"kind": "host"}
        pids = _pids(host) & _pids(killed9)
        if pids:
            ev["pid_match"] = (f"the kernel killed pid {min(pids)}, the pid torchrun reports "
                               "for that rank")
        # the kernel's line names a pid at most; the launcher names the rank it lost
        # (torchrun's -9, srun's "task 2: Out Of Memory"), or the rank says a process it
        # started died abruptly (the killer took a helper: a dataset.map worker, a pool's)
        died = [e for e in ix.of(K.EXCEPTION) if _CHILD_DIED.search(e.get_str("exception"))]
        reported = killed9 or _launcher_oom_deaths(ix) or died
        by_child = bool(died) and reported is died
        ranks = ranks_of(reported)
        how = ("SIGKILL" if killed9 else "a process it started died abruptly"
               if by_child else "the launcher's report")
        killer = ("the batch system killed the job over its memory limit" if
                  host[0].data.get("job") else "the host's OOM killer killed a process the "
                  "ranks started" if by_child else
                  "the host's OOM killer killed a training process")
        out.append(verdict(ix, "OOM", killer
                           + (f" (rank {format_ranks(ranks)}, {how})" if ranks else ""),
                           host + reported, ev, ranks=ranks))
    return out


# a rank's own words for a process it started dying without a word: HF datasets' map
# ("One of the subprocesses has abruptly died during map operation"), concurrent.futures
# ("A process in the process pool was terminated abruptly while the future was running")
_CHILD_DIED = re.compile(r"(?i)subprocess(?:es)? has abruptly died|process in the process "
                         r"pool was terminated abruptly")


def _launcher_oom_deaths(ix: EventIndex) -> list[Event]:
    """A launcher's report of a rank it lost to memory, or to the SIGKILL a memory limit
    sends (mpirun's "process rank 0 ... exited on signal 9"), the rank read from the report
    itself: a slurmstepd line srun's --label put in task 0's stream names no task."""
    return [e for e in ix.of(K.FLOOR) if (e.data.get("oom") or e.data.get("signal") == "SIGKILL")
            and e.rank is not None and e.data.get("rank_from") == "the launcher's report"]


def _pids(evs: list[Event]) -> set[int]:
    return {p for e in evs if (p := e.get_int("pid")) is not None}


def _cuda_oom(ix: EventIndex, cuda: list[Event]) -> list[Verdict]:
    if not cuda:
        return []
    xla = [e for e in cuda if e.data.get("xla_message")]
    if xla and len(xla) == len(cuda):
        return [verdict(ix, "OOM", f"the accelerator (XLA: TPU) ran out of memory: "
                        f"{cut(xla[0].get_str('xla_message'), 160)}", cuda,
                        {"kind": "XLA", "hint": "a smaller per-device batch, or sharding "
                         "(FSDP / SPMD) for what does not fit; memory that grows over epochs "
                         "is a graph that keeps changing or tensors kept across steps"})]
    sizes = {k: v for k, v in cuda[0].data.items() if k in (
        "tried_to_allocate", "gpu", "total_capacity", "free", "in_use",
        "allocated_by_pytorch", "reserved_unallocated") and v is not None}
    sizes.setdefault("total_capacity", cuda[0].data.get("total_old"))
    sizes.setdefault("free", cuda[0].data.get("free_old"))
    sizes = {k: v for k, v in sizes.items() if v is not None}
    msg = (f"CUDA out of memory: tried to allocate {sizes['tried_to_allocate']}"
           if "tried_to_allocate" in sizes else
           "CUDA out of memory: an allocation outside PyTorch's caching allocator failed "
           "(a CUDA context, NCCL's buffers, or a kernel's workspace)")
    if sizes.get("total_capacity"):
        msg += (f" on GPU {sizes.get('gpu', '?')} ({sizes.get('free', '?')} free of "
                f"{sizes['total_capacity']})")
    holder, mine, others = memory_holders(cuda[0].data)
    gpu = sizes.get("gpu", "?")
    if holder == "stray":
        # Many processes hold the same small amount on one GPU: the CUDA contexts of ranks
        # that touch a GPU not theirs, not a model too big for the card.
        return [verdict(
            ix, "GPU_DEVICE_MAPPING", f"{len(others)} other processes hold "
            f"{_gib(others[0])} each on GPU {gpu} (a CUDA context each), so it ran out "
            f"({msg}): each rank must use only its own GPU", cuda,
            {**sizes, "other_processes": len(others),
             "fix": "torch.cuda.set_device(LOCAL_RANK) before any CUDA call; no "
                    ".cuda()/torch.device('cuda') without an index"})]
    if holder == "others":
        held = ", ".join(_gib(b) for b in others[:4]) + (", ..." if len(others) > 4 else "")
        unlisted = cuda[0].get_int("unlisted_bytes", 0) > _CONTEXT_MAX
        held = ("processes the message does not name: another container's, or a previous "
                "run's that outlived it" if unlisted and len(others) == 1 else held)
        return [verdict(
            ix, "GPU_MEMORY_OCCUPIED", f"other processes hold {_gib(sum(others))} of GPU "
            f"{gpu} ({held}) against this process's {_gib(mine)}, so it ran out ({msg}): "
            "another job or service shares this GPU", cuda,
            {**sizes, "other_processes": len(others),
             "fix": "free the GPU (nvidia-smi shows who holds it) or give the job GPUs no "
                    "one else uses (CUDA_VISIBLE_DEVICES)"}, severity="error")]
    ev: dict[str, object] = {**sizes, "kind": "CUDA"}
    if others:
        ev["other_processes"] = len(others)
    return [verdict(ix, "OOM", msg, cuda, ev)]


_CONTEXT_MAX = 2 * 2**30  # a CUDA context and a little: what a stray rank leaves on a GPU
# other processes holding this much of a GPU took room the job counted on, even where the
# job holds more than they do
_OCCUPIED_SHARE = 0.25


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def memory_holders(d: Mapping[str, object]) -> tuple[str, int, list[int]]:
    """Who held a GPU that ran out, from the allocator's message: "mine" (this process
    holds most), "stray" (processes with one small, equal amount each: other ranks' CUDA
    contexts) or "others" (other workloads); with this process's bytes and the others'."""

    raw = d.get("others_bytes")
    others = [b for b in raw if isinstance(b, int)] if isinstance(raw, list) else []
    unlisted = d.get("unlisted_bytes")
    if isinstance(unlisted, int) and unlisted > _CONTEXT_MAX:
        others.append(unlisted)  # held by processes the message does not name
    mine = d.get("in_use_bytes")
    if not isinstance(mine, int):
        found = _mine_in_list(d, others)
        if found is None:
            return "mine", others[0], []  # one process listed and nothing else: maybe us
        mine = found
    total = size_bytes(str(d.get("total_capacity") or "")) or 0
    small = not total or sum(others) < _OCCUPIED_SHARE * total
    if not others or (mine >= sum(others) and small):
        return "mine", mine, others
    if len(others) >= 2 and max(others) <= min(_CONTEXT_MAX, int(1.1 * min(others))):
        return "stray", mine, others
    return "others", mine, others


def _mine_in_list(d: Mapping[str, object], others: list[int]) -> int | None:
    """This process's bytes where the message did not say them (torch < 2.2 listed this
    process among the others): the smallest entry that holds what PyTorch allocated here,
    taken out of ``others``; None when one process is listed and nothing else is known."""
    ours = size_bytes(str(d.get("allocated_by_pytorch") or "")) or 0
    fits = [b for b in others if ours and b >= ours]
    if fits:
        others.remove(min(fits))
        return min(fits)
    if not ours and len(others) == 1:
        return None
    return ours


def _allocator_oom(ix: EventIndex, cpu: list[Event]) -> list[Verdict]:
    if not cpu:
        return []
    # the smallest request: ranks aborting at once interleave their lines' digits
    asked = min((e.typed("tried_to_allocate_bytes", int) for e in cpu
                 if e.data.get("tried_to_allocate_bytes")), default=None)
    size = (f"{asked / 2**30:.2f} GiB" if asked and asked >= 2**30 else
            f"{(asked or 0) / 2**20:.1f} MiB")
    # a native allocator failing even a small request: the host ran out, whatever asked
    how = (f"the CPU allocator could not get {size}" if asked else
           f"a native allocator gave up ({cpu[0].text.strip()[:80]})")
    return [verdict(ix, "OOM", f"host out of memory: {how}", cpu,
                    {"kind": "host (allocator)", "tried_to_allocate_bytes": asked})]


def _routine_overflow(nan: list, ix: EventIndex) -> bool:
    """Non-finite gradient norms only (the loss stays finite): the logged norms of steps
    that were skipped or clipped (fp16's scaler skips them, routine while the scale
    settles). One such norm in a log whose scaler says it skips steps; or any, where the
    job's losses went on after the last (a scale that halved and recovered:
    XI3_cs503_nano4m_2node_gradnorm_nan_healthy)."""
    if not all(e.data.get("metric") == "grad_norm" for e in nan):
        return False
    if sum(1 + e.repeats for e in nan) == 1 and ix.of(K.SCALER_SKIP):
        return True
    # the last of them, repeats past the scanner's cap included: finite losses after it
    # say the step was skipped or clipped, scaler or not (torchtitan's pipeline-parallel
    # step 1 logs grad_norm inf on every stage, then 1,520 finite steps)
    return went_on_after(ix.events, max(nan, key=lambda e: e.last_lineno))


# a dynamic loss scaler's value on a trainer's progress line ("loss_scale: 131072.0000")
_SCALE = re.compile(r"(?i)\bloss[ _]scale\b")


def _count(nan: list) -> str:
    n = sum(1 + e.repeats for e in nan)
    return "one logged gradient norm" if n == 1 else f"{n} logged gradient norms"


def nonfinite(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    nan = ix.of(K.GRAD_NAN, K.GRAD_NONFINITE_NORM, K.LOSS_NAN)
    if not nan:
        return []
    if _routine_overflow(nan, ix):  # said, as what it most likely is: no failure
        return [verdict(ix, "GRAD_NONFINITE",
                        f"{_count(nan)} was {nan[0].data.get('value', 'inf')}, and "
                        "training went on with finite losses: most likely the norm of a "
                        "step that was skipped (fp16's loss scaler, routine while the scale "
                        "settles) or clipped", nan,
                        {"why": "no other metric is non-finite, and the losses after the "
                                "last of them are finite" + (
                                    "; a dynamic loss scaler runs in this log"
                                    if ix.of(K.SCALER_SKIP) or _SCALE.search(nan[0].text)
                                    else "")},
                        ranks=ranks_of(nan), severity="warning")]
    first = nan[0]
    ev: dict[str, object] = {}
    if first.kind is K.GRAD_NAN and "function" in first.data:
        ev["function"] = first.data["function"]
        title = f"backward of {first.data['function']} produced NaN (anomaly detection)"
    elif first.kind is K.GRAD_NAN:  # a framework's own check caught it (Megatron's)
        at = (f" at iteration {first.data['iteration']}" if "iteration" in first.data else "")
        title = (f"{rank_or(nan[:1], 'a rank')}: a {first.data.get('value', 'NaN')} value{at}, "
                 f"caught by the framework's check: {cut(first.text, 160)}")
    elif first.kind is K.GRAD_NONFINITE_NORM:
        title = "the gradient norm is non-finite (NaN/Inf) in clip_grad_norm_"
    else:
        at = (f" at iteration {first.data['iteration']}" if "iteration" in first.data else "")
        name = first.data.get("loss_name", "the loss")
        title = f"{name} became {first.data.get('value', 'NaN/Inf')}{at}"
    return [verdict(ix, "GRAD_NONFINITE", title, nan, ev, ranks=ranks_of(nan[:1]))]


# A divergence: the loss at least JUMP x the median before it (and JUMP_ABS above it), and
# every later value (3 at least, to the end of the log) still STAY x that median. A spike
# that comes back (BLOOM-176B's 2.2 -> 5.1 -> 2.8 within 30 iterations) is no finding.
JUMP, JUMP_ABS, STAY, AFTER = 1.5, 0.5, 1.3, 3


def divergence(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    if any(v.finding.id == "GRAD_NONFINITE" for v in earlier):
        return []
    by_rank: dict[int | None, list[Event]] = {}
    for e in ix.of(K.LOSS_VALUE):
        by_rank.setdefault(e.rank, []).append(e)
    for evs in by_rank.values():
        found = _jump_that_stays(evs)
        if found is not None:
            base, jumped = found
            at = (f" at iteration {jumped.data['iteration']}" if "iteration" in jumped.data
                  else "")
            last = evs[-1].data["value"]
            title = (f"the loss jumped from {base:.4g} to {jumped.data['value']:.4g}{at} and "
                     f"had not come back by the end of the log ({last:.4g}): training "
                     "diverging, or a spike it recovers from later")
            # A warning, never an error: a log cut inside a spike that recovers 500
            # iterations later (BLOOM tr1-13B) reads the same as a divergence.
            return [verdict(ix, "GRAD_NONFINITE", title, [jumped, evs[-1]],
                            {"baseline": round(base, 6), "losses_after": [
                                e.data["value"] for e in evs[evs.index(jumped):][:12]],
                             "why": "no NaN printed yet; the iterations after the log's end "
                                    "tell a divergence from a spike that recovers"},
                            ranks=ranks_of([jumped]), severity="warning")]
    return []


def _jump_that_stays(evs: list[Event]) -> tuple[float, Event] | None:
    import statistics

    values = [e.typed("value", float) for e in evs]
    for i in range(2, len(values) - AFTER):
        base = statistics.median(values[:i])
        if values[i] >= JUMP * base and values[i] - base >= JUMP_ABS \
                and all(v >= STAY * base for v in values[i + 1:]):
            return base, evs[i]
    return None


def advice(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """A framework's performance advice: one finding per finding id it points to, at that
    id's severity (a warning or info: never an error).
    Not in RULES: it runs after them, so it neither stops a rule that runs alone nor
    stands in for the floor's unrecognised failure."""
    by_id: dict[str, list[Event]] = {}
    for e in ix.of(K.ADVICE):
        by_id.setdefault(str(e.data.get("advice")), []).append(e)
    out = []
    for fid, evs in by_id.items():
        said = " ".join(evs[0].text.split())
        out.append(verdict(ix, fid, f"the framework advises: {said[:200]}", evs))
    return out


RULES = (
    Rule("ddp", ddp, frozenset({K.CONN_CLOSED, K.CONN_RESET})),
    Rule("shm", shm, frozenset({K.NCCL_SYSTEM, K.NCCL_DETAIL, K.NCCL_WARN, K.ERROR_LINE,
                                K.DL_EXITED})),
    DATALOADER,
    Rule("oom", oom, frozenset({K.AGENT_FAILED, K.NCCL_WATCHDOG, K.NCCL_REMOTE})),
    Rule("nonfinite", nonfinite, frozenset({K.PROCESS_EXIT, K.SEGFAULT, K.EXCEPTION})),
    Rule("divergence", divergence),
)
