"""Triage rules for processes that died, and for logs that hold nothing but the fallout."""

from __future__ import annotations

import re
from collections import defaultdict

from ddpdoctor.core.findings import format_ranks
from ddpdoctor.core.signames import signal_name
from ddpdoctor.diagnose.events import CASCADE, Event
from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.index import (
    LAUNCHER_PROG,
    MAIN_FIRST_HINT,
    WAITING_FRAME,
    EventIndex,
    Rule,
    Verdict,
    cut,
    explained_ranks,
    fmt,
    launchers_own,
    on_rank,
    rank_or,
    ranks_of,
    short_where,
    used,
    verdict,
)
from ddpdoctor.diagnose.rules_floor import is_refused, is_teardown, stopped_from_outside

# Signals with a cause of their own (SIGKILL: the OOM killer, SIGBUS: /dev/shm), not a crash
# in native code.
_OWN_RULE = ("SIGKILL", "SIGBUS")
_CRASH_FALLOUT = frozenset({K.GPU_FAULT, K.CPP_ABORT, K.PROCESS_EXIT, K.SEGFAULT, K.ERROR_LINE,
                            K.NCCL_WATCHDOG, K.NCCL_DETAIL, K.NCCL_CUDA, K.CUDA_ERROR,
                            K.AGENT_FAILED, K.TORCHRUN_FAILURE, K.EXCEPTION, K.FATAL_PYTHON})


# What a process that ends badly *at exit* prints, and its launcher's account of it; a
# Python exception (a failed save, an evaluation after training) is not among them.
_EXIT_CRASH = frozenset({K.FATAL_PYTHON, K.SEGFAULT, K.CPP_ABORT, K.PROCESS_EXIT, K.TEARDOWN,
                         K.AGENT_FAILED, K.TORCHRUN_FAILURE, K.FLOOR, K.SIGKILL, K.TRACEBACK})


def after_completion(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """The trainer said its training completed, and only after that did a process end
    badly (an abort or a segfault while it exits: destructors, a process group torn down
    late, garbage collection) with its launcher's report of it. What it saved is whole;
    the failing exit status is the teardown's. A warning: the job's work is done, its exit
    code still fails a pipeline. Anything that failed before the line, any Python
    exception after it, or a SIGKILL (the OOM killer) keeps the usual rules; so does the
    scheduler stopping the job (the floor says that stop, and that it came after the end)."""
    done = ix.of(K.JOB_DONE)
    failures = [e for e in ix.events if e.is_failure]
    if earlier or not done or not failures:
        return []
    last = done[-1]
    if any(e.source != last.source or e.lineno < last.lineno or e.kind not in _EXIT_CRASH
           or e.data.get("signal") == "SIGKILL" or is_refused(e) or stopped_from_outside(e)
           for e in failures):
        return []
    crash = next((e for e in failures if e.kind in (K.FATAL_PYTHON, K.SEGFAULT, K.CPP_ABORT)),
                 failures[0])
    who = f"rank {fmt([crash])}" if fmt([crash]) else "a process"
    return [verdict(ix, "RANK_CRASHED", f"{who} crashed at exit ({cut(crash.text, 80)}) after "
                    f"the trainer said training was over ({cut(last.text, 80)}): what it saved "
                    "before is complete, the failing exit status is the teardown's", failures,
                    {"after_completion": last.where,
                     "hint": "a crash in destructors at exit (a process group destroyed late "
                             "or never, threads still running): call "
                             "dist.destroy_process_group() at the end of training; the "
                             "exit code still fails a pipeline that checks it"},
                    ranks=[], severity="warning")]


def script_steps(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """The trainer said its training completed, and nothing else failed, but a step of the
    batch script did not: after it, the script's next step did not start (a command not
    found, the scheduler refusing the step it asked for: an evaluation, an upload); or
    before it, a set-up step failed (a helper not found, a task that exited non-zero).
    The job's work is done; the script's step is said as a warning, not left out."""
    done = ix.of(K.JOB_DONE)
    if earlier or not done:
        return []
    last = done[-1]
    end = (last.source, last.lineno)
    steps = [e for e in ix.of(K.SCRIPT_WENT_ON, K.FLOOR)  # in log order
             if e.kind is K.SCRIPT_WENT_ON or is_refused(e)]
    refused_only = not any(e.is_failure and not is_refused(e) for e in ix.events)
    later = [e for e in steps if (e.source, e.lineno) > end]
    if later and refused_only:
        return [verdict(ix, "UNRECOGNIZED_FAILURE", f"after the trainer said training was "
                        f"over ({cut(last.text, 80)}), the batch script's next step failed: "
                        f"{cut(later[0].text, 120)}", later,
                        {"after_completion": last.where,
                         "hint": "the training itself finished; fix the script's later "
                                 "command and run that step again, not the training"},
                        ranks=[], severity="warning")]
    before = [e for e in steps if e.kind is K.SCRIPT_WENT_ON and (e.source, e.lineno) < end]
    if not before or not refused_only or any(is_refused(e) for e in steps):
        return []
    return [verdict(ix, "UNRECOGNIZED_FAILURE", f"a step of the batch script failed before "
                    f"the training ({cut(before[0].text, 120)}); the training then ran and "
                    f"completed ({cut(last.text, 80)})", before,
                    {"after_it": last.where,
                     "hint": "the training itself finished; what that step was to do (a "
                             "cache dropped, a system file written, a tool set up) did not "
                             "happen: fix the script's command if the run needed it"},
                    ranks=[], severity="warning")]


def mpi_error(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """An MPI call failed and Open MPI's error handler aborted the job (kb/mpi.py): the
    rank whose call failed is where it began; the scheduler's kills that follow are the
    abort. What failed is the communication (a transfer, a buffer the transport could not
    register), so the transport's own reason is quoted."""
    evs = ix.of(K.MPI_ERROR)
    calls = [e for e in evs if "op" in e.data]
    if earlier or not calls:
        return []
    op = calls[0].get_str("op")
    ranks = sorted({e.rank for e in calls if e.rank is not None})
    why = "; ".join(dict.fromkeys(
        f"{e.data['error_class']}: {e.data['message']}" if "error_class" in e.data
        else f"{e.data['layer']}: {e.data['message']}" for e in evs if "op" not in e.data))
    who = f" on rank {format_ranks(ranks)}" if ranks else ""
    return [verdict(ix, "COMM_CONNECTIVITY", f"{op} failed{who}"
                    f"{f' ({cut(why, 140)})' if why else ''}: Open MPI's error handler "
                    "aborted every process of the job", evs,
                    {"mpi_call": op,
                     "hint": "the transport failed the transfer (with CUDA buffers: a "
                             "CUDA-aware MPI and its UCX/verbs build must match the driver; "
                             "try UCX_TLS / OMPI_MCA_pml settings or the NCCL backend for "
                             "GPU tensors)"},
                    ranks=ranks)]


def cuda_crash(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """A CUDA fault (illegal access and the like): the rank that hit it crashed."""
    bad = ix.of(K.CUDA_ILLEGAL, K.GPU_MEMFAULT) or [e for e in ix.of(K.CUDA_ERROR)
                                                    if id(e) not in used(earlier)]
    if not bad:
        return []
    e = bad[0]
    if e.kind is K.GPU_MEMFAULT:
        return [verdict(ix, "RANK_CRASHED", f"{rank_or(bad, 'a rank')} hit a GPU memory access "
                        f"fault on GPU node-{e.data['node']} at {e.data['address']} "
                        f"({e.data['reason']}): a kernel touched memory it does not own", bad,
                        {"hint": "rerun with AMD_SERIALIZE_KERNEL=3 (ROCm) to get the stack "
                                 "of the kernel that faulted"})]
    what = e.data.get("message", "an illegal memory access was encountered")
    via = (" (raised in the NCCL watchdog thread: the faulty kernel ran earlier, it is not "
           "NCCL's)" if e.data.get("watchdog") else "")
    hint = ("rerun with CUDA_LAUNCH_BLOCKING=1 to get the stack of the kernel that faulted"
            if "no kernel image" not in str(what) else
            "the installed torch (or an extension) was built without kernels for this GPU's "
            "compute capability (compare torch.cuda.get_arch_list() with "
            "torch.cuda.get_device_capability()): install a build that includes it")
    return [verdict(ix, "RANK_CRASHED", f"{rank_or(bad, 'a rank')} hit CUDA error: {what}{via}",
                    bad, {"hint": hint})]


def native_crash(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """Fatal Python error / segmentation fault / exit 139: a crash in native code."""
    if earlier:
        return []
    bad = [e for e in ix.of(K.FATAL_PYTHON, K.SEGFAULT) if not _watchdog_abort(ix, e)] or [
        e for e in ix.of(K.PROCESS_EXIT) if e.data.get("signal") not in (None, *_OWN_RULE)
        and not _watchdog_abort(ix, e)]
    if not bad or _after_connect_failure(ix, bad[0]):
        return []
    e = bad[0]
    what = e.data.get("what") or e.data.get("signal") or "Segmentation fault"
    frames = [x.data["where"] for x in ix.of(K.EXCEPTION) if x.data.get("where")]
    ev: dict[str, object] = {"hint": "a crash in native code (an extension, NCCL, a driver): "
                          "faulthandler's 'Current thread' stack names the Python call that "
                          "entered it"}
    return [verdict(ix, "RANK_CRASHED", f"{'rank ' + fmt(bad) if fmt(bad) else 'a process'} "
                    f"crashed in native code: {what}", bad, ev | ({"where": frames[0]}
                                                               if frames else {}))]


def _after_connect_failure(ix: EventIndex, e: Event) -> bool:
    """NCCL (2.8 and older) can crash in native code on its own error path once a socket
    connect failed in its bootstrap: the crash is that failure's, and the connect failure
    (its address and errno) says what to fix."""
    return any(ix.pos(c) < ix.pos(e) for c in ix.of(K.NCCL_SOCKET))


def _watchdog_abort(ix: EventIndex, e: Event) -> bool:
    """NCCL's watchdog takes the process down with SIGABRT after a timeout, by design ("To
    avoid data inconsistency, we are taking the entire process down"): in a log with a
    watchdog timeout, an exit by SIGABRT (-6), ranked or a launcher's, is the timeout's, and
    so is faulthandler's "Fatal Python error: Aborted" that the abort prints."""
    return bool(ix.of(K.NCCL_WATCHDOG)) and (e.data.get("signal") == "SIGABRT"
                                             or e.get_int("exit_code") == -6
                                             or (e.kind is K.FATAL_PYTHON
                                                 and e.get_str("what") == "Aborted"))


def interrupted(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """The first failure in the log is a KeyboardInterrupt raised in the job's own work (not
    inside a distributed wait): Ctrl-C or a SIGINT stopped a job that was running, and
    what follows (the launcher's teardown, its own errors in its interrupt handler) is that
    stop. Said as information: stopped, not broken (what the job warned of before it was
    stopped, a framework's advice, leads it). Interrupted inside a collective or a store
    wait is a hang someone stopped: the other rules read it."""
    if earlier:
        return []
    first = _first_failure(ix)
    if first is None or first.kind is not K.EXCEPTION or \
            first.get_str("exception", "").split(":")[0].strip() != "KeyboardInterrupt":
        return []
    where = first.get_str("where")
    if not where or WAITING_FRAME.search(where):
        return []  # interrupted where it waited, or nobody knows where: maybe a hang
    at = f" at {short_where(where)}"
    stopped = [e for e in ix.of(K.EXCEPTION)
               if e.get_str("exception", "").startswith("KeyboardInterrupt")]
    return [verdict(ix, "UNRECOGNIZED_FAILURE", f"the job was interrupted (KeyboardInterrupt"
                    f"{at}, on {len(stopped)} process(es)): Ctrl-C or a SIGINT stopped it in "
                    "its own work, not a failure the log shows", stopped,
                    {"stopped_by": "SIGINT (KeyboardInterrupt)",
                     "hint": "if nobody stopped it, the scheduler or a wrapper sent SIGINT "
                             "(a preemption, a time limit): its log says which; if it had "
                             "stopped making progress first, it hung: `ddpdoctor attach` on "
                             "the next hang names where each rank waits"},
                    ranks=[], severity="info")]


def _first_failure(ix: EventIndex) -> Event | None:
    # Traceback headers of interleaved ranks and the launcher's teardown come first
    return next((e for e in ix.events if e.is_failure and e.kind not in (K.TRACEBACK, K.TEARDOWN)
                 and not (e.kind is K.FLOOR and is_teardown(e))), None)


_SIGNALLED = re.compile(r"SignalException: Process (?P<pid>\d+) got signal: (?P<sig>\d+)")
_WHO_SENT = {
    "SIGHUP": "the terminal or session that started it closed (start it under nohup, tmux, "
              "screen or setsid, or from the scheduler)",
    "SIGTERM": "a scheduler, a time limit, a preemption or a person stopped it (its log or "
               "`sacct`/`kubectl describe` says which)",
    "SIGINT": "Ctrl-C or a wrapper's SIGINT stopped it",
}


def launcher_signalled(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """The launcher got a signal from outside (torchrun's "SignalException: Process P got
    signal: S" or its agent's "Received S death signal", DeepSpeed's "Main process received
    SIGINT") and passed it on to its ranks, before any rank failed of its own: the job was
    stopped, not broken; what the ranks and the launcher print after it is that stop. A
    SIGINT is a Ctrl-C (information, as an interrupted job is); any other signal ended a run
    that did not finish."""
    if earlier:
        return []
    said = ix.of(K.LAUNCHER_SIGNALLED) + [e for e in ix.of(K.EXCEPTION)
                                          if _SIGNALLED.search(e.get_str("exception", ""))]
    if not said or any(e.data.get("pattern") == "slurm.cancelled" for e in ix.of(K.FLOOR)):
        return []  # the scheduler's cancel says who stopped it (rules_floor reads it)
    said.sort(key=ix.pos)
    first = said[0]
    if any(ix.pos(e) < ix.pos(first) for e in ix.events if e.is_failure
           and e.kind not in _STOP_NOISE):
        return []  # a rank failed first: the signal is not the story
    name = _signal_of(first)
    what = (f"{rank_or([first], 'a rank')} got {name} from outside (its framework's signal "
            "handler said so) and the job stopped" if first.get_str("signature").startswith(
                "lightning.") else
            f"the launcher was stopped by {name} from outside and passed it on to the ranks")
    return [verdict(ix, "UNRECOGNIZED_FAILURE", f"{what}; no rank failed before it", said,
                    {"stopped_by": name,
                     "hint": _WHO_SENT.get(name, "something outside the job sent it") + "; "
                             "the ranks' last lines say how far it got (resume from the last "
                             "checkpoint)"},
                    ranks=[], severity="info" if name == "SIGINT" else "error")]


# what a launcher prints while it stops its workers: reports of the stop, not failures
_STOP_NOISE = frozenset({K.TRACEBACK, K.TEARDOWN, K.PROCESS_EXIT, K.AGENT_FAILED,
                         K.TORCHRUN_FAILURE, K.FLOOR})


def _signal_of(e: Event) -> str:
    if e.data.get("signame"):
        return e.get_str("signame")
    m = _SIGNALLED.search(e.get_str("exception", ""))
    signum = int(m["sig"]) if m else e.get_int("signum") or 0
    return signal_name(signum) or f"signal {signum}"


_TIMED_OUT = re.compile(r"(?i)time[d ]?out")


def main_first_wait(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """A rank that timed out in the barrier of a "main process first" block (YOLO's
    torch_distributed_zero_first, transformers' / accelerate's main_process_first): it
    waited for the main process, which was still doing the block's work (preparing or
    checking the dataset). The main process is the rank the job waited for."""
    explained = explained_ranks(earlier)
    waited = [e for e in ix.of(K.EXCEPTION) if e.data.get("main_first")
              and _TIMED_OUT.search(e.get_str("exception")) and e.rank not in explained]
    if not waited or any(e.rank == 0 for e in waited):
        return []
    block = waited[0].get_str("main_first")
    local = block.startswith("local_")
    ev: dict[str, object] = {
        "busy": f"the main process was still inside {block}() (the work every other rank "
                "waits for at its barrier)",
        "hint": MAIN_FIRST_HINT}
    who = "the main process of each node (local rank 0)" if local else "rank 0"
    waiters = f"rank {fmt(waited)}" if fmt(waited) else "the ranks waiting there"
    return [verdict(ix, "HANG_RANK_MISSING_COLLECTIVE", f"{who} did not reach the barrier of "
                    f"{block} in time: {waiters} timed out waiting for it: "
                    f"{cut(waited[0].get_str('exception'), 100)}", waited, ev,
                    ranks=[] if local else [0])]


_LOCAL_RANK_ARG = re.compile(r"--local[-_]rank")
_LOCAL_RANK_VALUE = re.compile(r"(--local[-_]rank)=\d+")


# argparse's prog of a launcher, never a training script's: torchrun, accelerate's
# subcommands ("Accelerate launch command", "accelerate <command> [<args>] launch"), deepspeed
def command_line(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """The script's argparse refused its command line: each process printed its usage and
    exited 2 before training. ``torch.distributed.launch`` adds ``--local_rank=N`` (torch
    < 2.0) or ``--local-rank=N`` (2.x) to every worker's arguments, the usual cause."""
    explained = explained_ranks(earlier)
    refused = [e for e in ix.of(K.CLI_ERROR) if e.rank not in explained]
    if not refused:
        return []
    # argparse exits 2: every rank the launcher reports with that code printed its usage
    # (an unprefixed usage line lent the root rank says nothing about the others)
    ranks = ranks_of([e for e in refused if not e.rank_from]) or ranks_of(
        [e for e in ix.of(K.TORCHRUN_FAILURE, K.PROCESS_EXIT) if e.data.get("exit_code") == 2]
        + [e for e in ix.root_failures if e.data.get("exit_code") == 2])
    message = refused[0].get_str("message")
    prog = refused[0].get_str("prog")
    if LAUNCHER_PROG.search(prog):
        # the launcher's own parser: it started no rank, the launch command is wrong
        return [verdict(ix, "UNRECOGNIZED_FAILURE", f"the launcher ({prog}) refused its "
                        f'command line, no rank started: "{cut(message, 160)}"', refused,
                        {"family": "launch_command", "message": message,
                         "hint": "an empty value is most often an environment variable the "
                                 "launch command expands that is not set on this node "
                                 "(MACHINE_RANK, NODE_RANK, MASTER_ADDR)"
                                 if message.endswith("''") else
                                 "compare the launch command with the launcher's --help"},
                        ranks=[])]
    if len(refused) > 1:  # every worker names its own --local-rank=N: one message
        message = _LOCAL_RANK_VALUE.sub(r"\1=N", message)
    who = f"rank {format_ranks(ranks)}" if ranks else "the job"
    ev: dict[str, object] = {"family": "command_line", "message": message}
    if _LOCAL_RANK_ARG.search(message):
        ev["hint"] = ("torch.distributed.launch passes --local_rank=N (torch < 2.0) or "
                      "--local-rank=N (torch >= 2.0) to every worker: accept both "
                      "(parser.add_argument('--local_rank', '--local-rank', type=int)), or "
                      "launch with torchrun, which sets LOCAL_RANK in the environment "
                      "instead")
    deaths = [e for e in ix.of(K.TORCHRUN_FAILURE) if e.rank in ranks]
    return [verdict(ix, "RANK_CRASHED", f"{who}: {refused[0].get_str('prog')} refused its "
                    f"command line: {cut(message, 160)}", refused + deaths, ev, ranks=ranks)]


def extension_build(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """A C++/CUDA extension that would not compile when a rank first needed it: the rank
    dies at start-up with the compiler's words above its traceback (or with no traceback
    in the log at all, only its launcher's exit report). The compiler's first error says
    why; the fix is the toolchain, not the training code."""
    built = ix.of(K.EXT_BUILD)
    if not built:
        return []
    name = next((e.get_str("extension") for e in built if e.data.get("extension")), "")
    why = next((e.get_str("compiler_error") for e in built if e.data.get("compiler_error")),
               "")
    # a launcher's exit report can be the root failure too: each event once
    deaths = [e for e in {id(e): e for e in [*ix.root_failures, *ix.of(K.PROCESS_EXIT)]}.values()
              if e.data.get("exit_code") and e.rank is not None]
    # the compiler's lines name no rank of their own: given to the launcher's first failed
    # rank, they say less than the reports of every rank that died (each built and failed:
    # X11_deepspeed_cpu_adam_jit_build_gcc_too_old, both nodes)
    ranks = (ranks_of(e for e in built if not e.rank_from) or ranks_of(deaths)
             or ranks_of(built))
    what = f"the extension '{name}'" if name else "a C++/CUDA extension"
    title = (f"{'rank ' + format_ranks(ranks) if ranks else 'the job'}: {what} failed to "
             f"build at start-up" + (f": {cut(why, 140)}" if why else ""))
    ev: dict[str, object] = {
        "family": "extension_build",
        "hint": ("torch.utils.cpp_extension compiles it the first time a rank needs it "
                 "(DeepSpeed's ops, fused kernels): the compiler's first error is the cause: "
                 "a compiler too old or missing, CUDA_HOME or headers not found; load a newer "
                 "compiler, or install the op prebuilt (DeepSpeed: DS_BUILD_OPS=1 / "
                 "DS_BUILD_CPU_ADAM=1 pip install deepspeed)")}
    if why:
        ev["compiler_error"] = why
    return [verdict(ix, "RANK_CRASHED", title, built + deaths, ev, ranks=ranks)]


def exceptions(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """A Python exception on a rank that no specific rule explains: that rank crashed."""
    groups: dict[str, list[Event]] = defaultdict(list)
    for e in _first_per_rank(ix, earlier).values():
        groups[e.get_str("exception", e.text)].append(e)
    out = []
    for msg, evs in groups.items():
        where = next((e.typed("where", str) for e in evs if e.data.get("where")), "")
        ev: dict[str, object] = {"exception": msg}
        ranks = ranks_of(evs)
        for f in ix.root_failures:
            if f.rank in ranks:
                ev["exit_code"] = f.data.get("exit_code")
        at = f" at {short_where(where)}" if where else ""
        who = f"rank {format_ranks(ranks)}" if ranks else "the job"
        if _MEMORY.search(msg):
            # The exception's own type or message is the memory family, whoever raised it
            # (ray.exceptions.OutOfMemoryError, MemoryError, a CUDA allocator's words).
            out.append(verdict(ix, "OOM", f"{who} ran out of memory: {cut(msg, 160)}{at}",
                               evs, {**ev, "family": "memory"}, ranks=ranks))
            continue
        if _NONFINITE.search(msg) or _NUMERIC.search(msg) or _numeric_in_training(ix, msg, evs):
            # a guard that stops the job on a NaN/Inf gradient or loss (Megatron's "found NaN
            # in local grad norm", a trainer's own assert): the numbers diverged, whoever
            # raised it
            out.append(verdict(ix, "GRAD_NONFINITE", f"{who} stopped on a non-finite value: "
                               f"{cut(msg, 160)}{at}", evs, {**ev, "family": "nonfinite"},
                               ranks=ranks))
            continue
        out.append(verdict(ix, "RANK_CRASHED", f"{who} raised {cut(_said(msg), 160)}{at}",
                           evs, ev, ranks=ranks))
    return out


def _first_per_rank(ix: EventIndex, earlier: tuple[Verdict, ...]) -> dict[int | None, Event]:
    """Each rank's first exception no earlier rule used (Python prints the original cause
    first; a rank's own traceback before torchrun's copy of it in its summary)."""
    explained = explained_ranks(earlier)
    taken = used(earlier)
    helpers_only = not any(e.is_failure and not e.data.get("spawn_bootstrap")
                           and e.kind is not K.TRACEBACK for e in ix.events)
    first: dict[int | None, Event] = {}
    for e in sorted(ix.of(K.EXCEPTION), key=lambda x: bool(x.rank_from)):
        if id(e) in taken or "in_dataloader_worker" in e.data or "dataloader_start" in e.data:
            continue
        if e.rank in explained or _follows_cascade(ix, e) or not _a_ranks_own(ix, e,
                                                                                helpers_only):
            continue
        first.setdefault(e.rank, e)
    return first


def _a_ranks_own(ix: EventIndex, e: Event, helpers_only: bool) -> bool:
    """Whether ``e`` is a rank's own exception, not another process's. A spawned helper
    failing at its start is no rank's death where the log shows another end of the job (a
    scheduler's time limit, a launcher's report: that one says it); the agent's own error
    (its rendezvous losing the store when another node's agent went away) after a rank's
    death is the launcher's fallout."""
    if e.data.get("spawn_bootstrap") and not helpers_only:
        return False
    return not (launchers_own(e) and any(f.rank is not None for f in ix.root_failures))


def _said(msg: str) -> str:
    # what Python prints when the exception's own __str__ raised: its type is all there is
    return msg.replace("<exception str() failed>", "(its message could not be printed)")


# NaN/Inf said of a gradient or a loss, in either order, in an exception's message
# ("No inf checks were recorded" is GradScaler's complaint about the code, not a value)
_NONFINITE = re.compile(r"(?i)\b(?:nan|inf|infinite|non-?finite)\b(?! checks)[^.]{0,60}"
                        r"\b(?:grad\w*|loss)\b|\b(?:grad\w*|loss)\b[^.]{0,60}"
                        r"\b(?:nan|inf|infinite|non-?finite)\b(?! checks)")
# a guard's "NaN ... diverged" (detectron2's FloatingPointError on its predicted boxes): the
# numbers went non-finite, whichever value the guard looked at
_NUMERIC = re.compile(r"(?i:\b(?:nan|inf)\b[^\n]{0,80}\bdiverged\b)")


def _numeric_in_training(ix: EventIndex, msg: str, evs: list[Event]) -> bool:
    """Python's FloatingPointError (numpy's seterr: "divide by zero encountered in divide",
    "overflow encountered in exp") raised after the job printed a loss (before it in its
    file, or in another file of the job): the numbers of the training went non-finite.
    Before any loss (a data set's statistics, a preprocessing step) it is the code's own
    error, a crash like any other."""
    if not msg.startswith("FloatingPointError"):
        return False
    first = min(evs, key=ix.pos)
    # another file's losses (a rank's own log) count wherever they are: files hold no
    # common order, and a loss printed at all means the training had started
    return any(e.source != first.source or e.lineno < first.lineno
               for e in ix.of(K.LOSS_VALUE))
_MEMORY = re.compile(r"OutOfMemory|\bMemoryError\b|out of memory|running low on memory|"
                     r"Cannot allocate memory|can't allocate memory", re.IGNORECASE)


def own_exit(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """Every rank the launcher reports exited with one and the same chosen code (2 to 127:
    not Python's 1 for an uncaught exception, not a signal's 128+N) and none printed an
    error: the program stopped itself (``sys.exit(65)`` after a check of its own), no rank
    crashed first, whichever the launcher calls the root cause."""
    if earlier:
        return []
    # torchrun's summary records and its agent's "failed (exitcode: N) local_rank: L" line
    records = ix.of(K.TORCHRUN_FAILURE, K.AGENT_FAILED)
    codes = {e.get_int("exit_code") for e in records}
    # one process per pid (the agent's line and the summary's record of it are one)
    procs = {e.get_int("pid") or ("rank", e.rank) for e in records}
    if len(procs) < 2 or len(codes) != 1:
        return []
    code = codes.pop()
    if code is None or not 2 <= code <= 127:
        return []
    ranks = sorted({e.rank for e in records if e.rank is not None})
    who = f" (rank {format_ranks(ranks)})" if len(ranks) == len(procs) else ""
    return [verdict(ix, "UNRECOGNIZED_FAILURE", f"every rank the launcher reports{who} "
                    f"exited with code {code} and none printed an "
                    f"error: the program stopped itself with an exit code of its own "
                    f"(sys.exit({code}) after a check it makes); its own output says why",
                    records, {"exit_code": code, "family": "own_exit",
                              "hint": f"search the training script and its libraries for "
                                      f"exit({code}) / sys.exit({code}): the condition "
                                      "before it is the reason"}, ranks=[])]


def at_once(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """Several nodes' torchrun summaries each name a first failure, all in the same second
    with one exit code, and no rank's own error is in the log (only the launchers'
    reports): no rank failed before the others, so none is the culprit; what made every
    node's ranks exit at once is not in these lines (XG9_nemo_k8s_3600rank_launcher_only_
    exit1: 3,600 ranks, exit code 1 at 21:41:00 on every pod)."""
    roots = list(ix.root_failures)
    hosts_named = {e.get_str("host") for e in roots}
    if earlier or len(hosts_named) < 2:
        return []
    if len({e.get_str("time") for e in roots}) != 1 or not roots[0].get_str("time") \
            or len({e.get_int("exit_code") for e in roots}) != 1:
        return []
    # only the launchers' reports: any other failure line (a rank's own, the scheduler's
    # stated reason such as a node failure) says more than "at once"
    if any(e.is_failure and not is_teardown(e) and (
            e.kind not in _LAUNCHER_SAID
            or e.kind is K.FLOOR and not str(e.data.get("pattern", "")).startswith("elastic."))
           for e in ix.events):
        return []
    code = roots[0].get_int("exit_code")
    hosts = len(hosts_named)
    return [verdict(ix, "UNRECOGNIZED_FAILURE", f"the ranks torchrun named first on {hosts} "
                    f"nodes (rank {fmt(roots)}) all exited with code {code} in the same "
                    f"second ({roots[0].get_str('time')}): no rank failed before the others, "
                    "and no rank's own error is in these logs", roots,
                    {"exit_code": code, "family": "at_once",
                     "hint": "read one rank's own output (torchrun --tee 3 or --log-dir, or "
                             "@record on main so error_file is written): every node failing "
                             "at once is the job's own (a config, a data path, a check all "
                             "ranks make) or something they share (storage, the network)"},
                    ranks=[])]


def dead_ranks(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """A death no line above explains: torchrun's first failure, a signal, a bare exit."""
    explained = explained_ranks(earlier)
    felt = {e.rank for e in ix.events if e.kind in CASCADE and e.kind is not K.AGENT_FAILED
            and not _own_cut_traceback(e)}
    out: list[Verdict] = []
    pids = {p for e in ix.root_failures if (p := e.get_int("pid")) is not None}
    signalled = [e for e in ix.of(K.PROCESS_EXIT) if e.data.get("signal") in _OWN_RULE]
    for e in list(ix.root_failures) + ix.of(K.SIGKILL) + signalled:
        if _told_already(e, explained, pids, bool(out)) or _died_of_fallout(e, felt) \
                or _lone_exit(ix, e):
            continue
        out.append(_death(ix, e))
        explained.add(e.rank)
    return out


def bare_exit(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """A process that exited non-zero, and nothing else in the log says why: the last
    resort before the floor, after the rules for failures that explain a bare exit (a rank
    that could not reach the store, a lost connection)."""
    exits = [e for e in ix.of(K.PROCESS_EXIT) if e.data.get("exit_code")
             and not _watchdog_abort(ix, e)]
    return [_bare_exit(ix, exits[0])] if exits else []


def _told_already(e: Event, explained: set[int | None], root_pids: set[int],
                  found_one: bool) -> bool:
    """The same death, as another line tells it."""
    if e.rank in explained:
        return True
    launcher = e.kind in (K.TORCHRUN_FAILURE, K.AGENT_FAILED)
    return not launcher and (e.data.get("pid") in root_pids or (found_one and e.rank is None))


# what a launcher prints of a worker's exit: its report, the floor's copy of it, its own
# ChildFailedError traceback
_LAUNCHER_SAID = frozenset({K.AGENT_FAILED, K.TORCHRUN_FAILURE, K.FLOOR, K.TRACEBACK})


def _lone_exit(ix: EventIndex, e: Event) -> bool:
    """The launcher's report of an exit code, and nothing else: no other worker torn down
    or heard from. Nothing says a rank crashed and took a job down; the floor says what was
    seen, a failure no line explains (the labelling convention's UNRECOGNIZED_FAILURE)."""
    code = e.get_int("exit_code")
    if e.kind not in (K.AGENT_FAILED, K.TORCHRUN_FAILURE) or code is None or code <= 0:
        return False
    if ix.of(K.TEARDOWN) or any(x.rank not in (None, e.rank) for x in ix.events):
        return False
    # ... and no line of the worker's own (an exception the launcher's line follows)
    return not any(x.is_failure and x.kind not in _LAUNCHER_SAID for x in ix.events)


def _own_cut_traceback(e: Event) -> bool:
    """A traceback that lost its exception line, raised in the rank's own code (a frame of
    its script, none in a collective or the launcher): the rank's own error, not one it
    felt (a logger printed the frames and the message without its type: XH3's accelerate
    + DeepSpeed device mismatch)."""
    return e.kind is K.TRACEBACK and bool(e.data.get("where")) and not launchers_own(e) \
        and not any(e.data.get(k) for k in ("in_collective", "interleaved", "in_thread",
                                             "in_dataloader"))


def _died_of_fallout(e: Event, felt: set[int | None]) -> bool:
    """It exited on an error it felt (a timeout, a reset; NCCL aborts with SIGABRT after a
    watchdog timeout): fallout, not a crash of its own."""
    code = e.get_int("exit_code")
    return e.rank in felt and code is not None and (code > 0 or code == -6)


def _bare_exit(ix: EventIndex, e: Event) -> Verdict:
    return verdict(ix, "RANK_CRASHED", f"a training process exited with code "
                   f"{e.data['exit_code']} (its own error is not in the logs)", [e],
                   {"exit_code": e.data["exit_code"]})


def _who(e: Event) -> str:
    if e.rank is not None:
        return f"rank {e.rank}"
    if e.data.get("process") is not None:
        return f"process {e.data['process']}"
    return f"a process (pid {e.data['pid']})" if e.data.get("pid") else "a process"


def _death(ix: EventIndex, e: Event) -> Verdict:
    """The finding for one process death: the signal decides which."""
    # A shell's 128+N exit code says nothing the signal does not; a launcher's returncode
    # (DeepSpeed's -9) is the exit status itself.
    code = (None if e.kind is K.PROCESS_EXIT and not e.data.get("launcher")
            else e.get_int("exit_code"))
    sig = e.data.get("signal")
    who = _who(e)
    ranks = [e.rank] if e.rank is not None else []
    ev: dict[str, object] = {"exit_code": code}
    ev.update({k: e.data[k] for k in ("host", "traceback", "reported_exit_code")
               if e.data.get(k)})
    if code == -9 or sig == "SIGKILL":
        # Nothing printed, then SIGKILL: in the public reports this is the host's (or the
        # container's) OOM killer almost every time; say so, and how to confirm it.
        ev.update(kind="host (probable)", confirmed=False, hint=(
            "SIGKILL with no message is most often the host's OOM killer: confirm with "
            "`dmesg -T | grep -i oom` on that host (or pass that output to ddpdoctor "
            "diagnose too); a scheduler's kill (time limit) is the other cause"))
        return verdict(ix, "OOM", f"{who} was killed by SIGKILL"
                       + (" (exit code -9)" if code == -9 else "")
                       + ": most likely the host ran out of memory", [e], ev, ranks=ranks)
    if code == -7 or sig == "SIGBUS":
        ev["hint"] = ("SIGBUS in a training process: a page of a shared-memory mapping could "
                      "not be backed, almost always /dev/shm full (a container's 64 MB "
                      "default)")
        return verdict(ix, "ENV_SHM_TOO_SMALL", f"{who} died of SIGBUS (exit code "
                       f"{code if code is not None else -7}): /dev/shm is most likely too "
                       "small", [e] + ix.of(K.SIGKILL), ev, ranks=ranks)
    if code is not None and code < 0:
        title = f"{who} died of {sig or 'a signal'} (exit code {code})"
    elif code is not None and (tb := _cut_traceback_of(ix, e)) is not None:
        title = (f"{who} exited with code {code} after a traceback through "
                 f"{short_where(tb.get_str('where', ''))} whose exception line is not in the logs")
        ev["traceback"] = tb.where
    elif code is not None:
        title = f"{who} exited with code {code} (its traceback is not in the logs)"
    else:
        title = f"{who} died of {sig}"
    return verdict(ix, "RANK_CRASHED", title, [e], ev, ranks=ranks)


def _cut_traceback_of(ix: EventIndex, e: Event) -> Event | None:
    """The rank's own traceback that lost its exception line, the last one before its exit
    in the same log, if the log has one."""
    before = [t for t in ix.of(K.TRACEBACK) if t.rank == e.rank and t.source == e.source
              and t.lineno < e.lineno and _own_cut_traceback(t)]
    return before[-1] if before else None


def rendezvous(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    connect = ix.of(K.CONNECT_TIMEOUT, K.CONN_REFUSED)
    if not connect:
        return []
    target = next((f"{e.data['host']}:{e.data['port']}" for e in connect
                   if e.data.get("host")), "")
    errno = next((e.data for e in connect if e.data.get("errno")), {})
    ev: dict[str, object] = {"endpoint": target} if target else {}
    why = ""
    if errno:
        ev["errno"] = f"{errno['errno']} ({errno['reason']})"
        why = f" (errno {errno['errno']}: {errno['reason']})"
    who = f"rank {fmt(connect)}" if fmt(connect) else "a rank"
    return [verdict(ix, "ENV_RENDEZVOUS_UNREACHABLE", f"{who} could not reach the rendezvous "
                    f"store{' at ' + target if target else ''}{why}", connect, ev)]


# NCCL's socket code on a recv that returned 0: the peer closed the connection in order,
# which its kernel does when the process ends (killed or crashed); a network fault resets
# or times out instead
_CLOSED_BY_PEER = re.compile(r"Connection closed by remote peer (?P<host>[^\s<]+)")
_CLOSED = re.compile(r"Connection closed by (?:remote )?peer")


# ncclSystemError with no peer named: a system call of NCCL's own failed (its message:
# "System call (socket, malloc, munmap, etc) failed."); in a container the usual one is
# shm_open / mmap of /dev/shm (XG3_dekr_docker_nccl_system_error_ipc,
# J1_nccl_tests_unhandled_system_error_docker_ipc_host: fixed by docker --ipc=host)
_SYSTEM_HINT = ("NCCL's own system call failed: rerun with NCCL_DEBUG=INFO, whose WARN line "
                "names the call and its errno. Shared memory (shm_open, mmap): in a "
                "container /dev/shm is often too small (docker run --ipc=host or "
                "--shm-size=8g; Kubernetes: an emptyDir with medium: Memory at /dev/shm). A "
                "socket: the interface NCCL chose (NCCL_SOCKET_IFNAME), or a container's "
                "bridge network between nodes")


def comm(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    evs = ix.of(K.NCCL_REMOTE, K.NCCL_SYSTEM, K.NCCL_PEER_LOST, K.NCCL_SOCKET)
    if not evs:
        return []
    closed = [(e, m) for e in ix.of(K.CONN_CLOSED) if (m := _CLOSED_BY_PEER.search(e.text))]
    if closed and not ix.of(K.NCCL_SYSTEM, K.NCCL_SOCKET):
        host = closed[0][1]["host"]
        return [verdict(ix, "RANK_CRASHED", f"a process on {host} ended: NCCL"
                        f"{on_rank(evs)} saw its connection closed by that peer (an "
                        "orderly close: the process exited or was killed, not the network); "
                        "its own error is not in these logs", [e for e, _ in closed] + evs,
                        {"peer_host": host,
                         "hint": f"read the logs of the ranks on {host} (their exit code, "
                                 "an OOM kill in dmesg, a node that went away)"}, ranks=[])]
    peer = next((e.data for e in evs if e.data.get("address")), {})
    system_only = not peer and all(e.kind is K.NCCL_SYSTEM for e in evs)
    ev: dict[str, object] = {"hint": _SYSTEM_HINT if system_only else "a peer exited or the "
                             "network failed; if no rank crashed, rerun with NCCL_DEBUG=INFO "
                             "and check the interface (NCCL_SOCKET_IFNAME)"}
    with_peer = ""
    if peer:
        ev["peer"] = f"{peer['address']}:{peer['port']}"
        with_peer = f" with peer {ev['peer']} ({peer.get('reason', '')})"
    victims = [e for e in ix.of(K.CONN_CLOSED) if _CLOSED.search(e.text)]
    origin = _failed_first(ix, victims)
    if origin:
        ranks = sorted({e.rank for e in origin if e.rank is not None})
        first = ev["first_warning"] = origin[0].get_str("message", origin[0].text)
        return [verdict(ix, "COMM_CONNECTIVITY", f"NCCL failed first on rank {fmt(origin)}: "
                        f"{cut(first, 100)}; rank {fmt(victims)} then saw "
                        "their connections closed by them", origin + evs, ev, ranks=ranks)]
    what = "NCCL's own system call failed" if system_only else "NCCL lost a connection"
    return [verdict(ix, "COMM_CONNECTIVITY", f"{what}{on_rank(evs)}{with_peer}: "
                    f"{cut(evs[0].text, 120)}", evs, ev, ranks=[])]


def _failed_first(ix: EventIndex, closed: list[Event]) -> list[Event]:
    """The NCCL warnings of the ranks where the failure began: when some ranks only saw
    their connections closed by a peer, the ranks that warned of something else before
    that (a verbs call failing, a device error) are where it started. A warning the
    closed-on ranks print too is the job's common noise, not a start."""
    victims = {e.rank for e in closed if e.rank is not None}
    if not victims:
        return []
    first_close = min(ix.pos(e) for e in closed)
    warns = [e for e in ix.of(K.NCCL_WARN) if e.rank is not None]
    common = {_shape(e) for e in warns if e.rank in victims}
    return [e for e in warns if e.rank not in victims and ix.pos(e) < first_close
            and _shape(e) not in common and not _CLOSED.search(e.text)]


def _shape(e: Event) -> str:
    return re.sub(r"\d+", "#", e.get_str("message", e.text))


def peer_gone(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    peer = ix.of(K.CONN_RESET, K.CONN_CLOSED, K.BROKEN_PIPE)
    if not peer:
        return []
    if _launch_succeeded(ix):
        # seen, and said, but no failure: the ids name failures, and this is none
        return [verdict(ix, "UNRECOGNIZED_FAILURE", "connections were reset while the job "
                        "ended, after its launcher said the processes exited successfully: "
                        "the store's host left first at teardown (not a failure)",
                        peer + ix.of(K.LAUNCH_SUCCEEDED),
                        {"hint": "call dist.destroy_process_group() on every rank before it "
                                 "exits to end without these lines"},
                        ranks=[], severity="info")]
    return [verdict(ix, "RANK_CRASHED", "another rank went away (connection reset/closed by "
                    f"peer{on_rank(peer)}); its own error is not in these logs",
                    peer, {"hint": "the peer that closed the connection crashed first; its log "
                           "is not among the inputs: pass every rank's log"}, ranks=[])]


def _launch_succeeded(ix: EventIndex) -> bool:
    """A launcher said processes ended well, and no process is reported failed: no exit
    report with a non-zero code or a signal, no failure line of the floor's."""
    if not ix.of(K.LAUNCH_SUCCEEDED):
        return False
    failed = [e for e in ix.of(K.PROCESS_EXIT, K.TORCHRUN_FAILURE, K.AGENT_FAILED, K.FLOOR,
                               K.EXCEPTION, K.TRACEBACK) if e.is_failure]
    return not failed


def _follows_cascade(ix: EventIndex, e: Event) -> bool:
    """An exception printed right after a cascade error of the same rank continues it
    (NCCL's "ncclRemoteError: ..." / "Last error:" lines under a DistBackendError)."""
    i = ix.pos(e)
    for prev in ix.events[max(0, i - 8):i]:
        if (prev.kind in CASCADE and prev.rank == e.rank and prev.source == e.source
                and 0 <= e.lineno - prev.lineno <= 8):
            return True
    return False


RULES = (
    Rule("after_completion", after_completion, _EXIT_CRASH | _CRASH_FALLOUT),
    Rule("script_steps", script_steps),
    Rule("mpi_error", mpi_error, _CRASH_FALLOUT | CASCADE | {K.FLOOR}),
    Rule("cuda_crash", cuda_crash, _CRASH_FALLOUT),
    Rule("native_crash", native_crash, _CRASH_FALLOUT),
    Rule("interrupted", interrupted, _CRASH_FALLOUT | CASCADE | {K.FLOOR, K.TRACEBACK}),
    Rule("launcher_signalled", launcher_signalled,
         _CRASH_FALLOUT | CASCADE | {K.FLOOR, K.TRACEBACK, K.EXCEPTION, K.LAUNCHER_SIGNALLED}),
    Rule("main_first_wait", main_first_wait, _CRASH_FALLOUT | CASCADE),
    Rule("command_line", command_line, _CRASH_FALLOUT | CASCADE | {K.FLOOR, K.TEARDOWN,
                                                                   K.TRACEBACK}),
    Rule("extension_build", extension_build, _CRASH_FALLOUT | CASCADE | {K.FLOOR, K.TEARDOWN,
                                                                         K.TRACEBACK}),
    Rule("exceptions", exceptions, _CRASH_FALLOUT | CASCADE),
    Rule("own_exit", own_exit, _CRASH_FALLOUT | CASCADE),
    Rule("at_once", at_once, _CRASH_FALLOUT | CASCADE),
    Rule("dead_ranks", dead_ranks, _CRASH_FALLOUT | CASCADE),
)
ALONE = (
    Rule("rendezvous", rendezvous, frozenset({K.EXCEPTION, K.ERROR_LINE, K.STORE_TIMEOUT}),
         alone=True),
    Rule("comm", comm, CASCADE, alone=True),
    Rule("peer_gone", peer_gone, CASCADE, alone=True),
    Rule("bare_exit", bare_exit, _CRASH_FALLOUT | CASCADE, alone=True),
)
