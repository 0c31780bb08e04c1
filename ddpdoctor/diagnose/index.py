"""An immutable index of one job's events, and the verdict type rules return."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Literal

from ddpdoctor.core.findings import Finding, Severity, format_ranks
from ddpdoctor.diagnose.events import CASCADE, Event, EventKind
from ddpdoctor.diagnose.launches import went_on_after

# Frames where a process waits: a collective, a store, a launcher or a loader waiting on its
# children, a sleep. A process stopped or failing there was waiting for another.
WAITING_FRAME = re.compile(r"/distributed/|/c10d|/multiprocessing/|threading\.py|selectors\.py|"
                           r"queue\.py|subprocess\.py|socket\.py|popen_\w+\.py|/elastic/|"
                           r"in (?:sleep|wait|join|recv|accept|get)\b")
_MAX_LINES = 6
# What fixes the "main process first" family (rank 0 busy preparing data while the others
# wait for it): rules_crash.main_first_wait and rules_collective._store_main_first
MAIN_FIRST_HINT = ("raise the process group's timeout (init_process_group(timeout=...), "
                   "ddp_timeout), or prepare and cache the dataset before the job starts")


@dataclass(frozen=True)
class EventIndex:
    """The events of a job in log order, by kind, and what torchrun said failed first."""

    events: tuple[Event, ...]
    by_kind: Mapping[EventKind, tuple[Event, ...]]
    root_failures: tuple[Event, ...]
    versions: Mapping[str, str]
    _pos: Mapping[int, int] = field(repr=False)
    # every rank that printed a line: the census and the events' own ranks
    ranks_seen: frozenset[int] = frozenset()

    @classmethod
    def build(cls, events: Iterable[Event]) -> EventIndex:
        evs = list(events)
        # the scanner's census of ranks that printed: read here, seen by no rule
        seen = [e for e in evs if e.kind is EventKind.RANK_SEEN]
        evs, root = _first_failure(_node_local_ranks(_spawned_ranks(_checkpoint_ranks(
            [e for e in evs if e.kind is not EventKind.RANK_SEEN]))))
        evs = _attribute_unprefixed(_one_per_failed_rank(_one_per_process(evs)),
                                    root.rank if root else None)
        evs = _left_by_elimination(evs)
        evs = _script_went_on(_one_process(_done_then_trained(_outlived(evs))), seen)
        by_kind: dict[EventKind, list[Event]] = {}
        for e in evs:
            by_kind.setdefault(e.kind, []).append(e)
        roots = [e for e in evs if e.data.get("first")
                 and e.kind in (EventKind.TORCHRUN_FAILURE, EventKind.AGENT_FAILED)]
        return cls(tuple(evs), MappingProxyType({k: tuple(v) for k, v in by_kind.items()}),
                   tuple(roots), MappingProxyType(_versions(by_kind.get(EventKind.VERSION, []))),
                   MappingProxyType({id(e): i for i, e in enumerate(evs)}),
                   frozenset(e.rank for e in (*evs, *seen) if e.rank is not None))

    @property
    def root_rank(self) -> int | None:
        return self.root_failures[0].rank if self.root_failures else None

    def of(self, *kinds: EventKind) -> list[Event]:
        """The events of ``kinds``, in log order."""
        out = [e for k in kinds for e in self.by_kind.get(k, ())]
        return sorted(out, key=self.pos) if len(kinds) > 1 else out

    def pos(self, e: Event) -> int:
        return self._pos.get(id(e), 0)


# torch.distributed.checkpoint gathers every rank's error into one exception on the rank
# that reports it: "CheckpointException ranks:dict_keys([0, 1, 6])", then one "Traceback
# ... (RANK N)" block per rank named, in that order
_DCP_RANKS = re.compile(r"CheckpointException ranks:dict_keys\(\[(\d+(?:, \d+)*)\]\)")


def _checkpoint_ranks(evs: list[Event]) -> list[Event]:
    """The errors a DCP CheckpointException carries, each given the rank it names: a save
    that failed on ranks 0, 1 and 6 (a full disk) is theirs, not the reporting rank's."""
    out = list(evs)
    for i, e in enumerate(evs):
        m = _DCP_RANKS.search(e.text) if e.kind is EventKind.EXCEPTION else None
        if m is None:
            continue
        ranks = [int(x) for x in m.group(1).split(", ")]
        inner = [j for j in range(i + 1, len(evs)) if evs[j].kind is EventKind.EXCEPTION
                 and evs[j].source == e.source and evs[j].rank == e.rank][:len(ranks)]
        if len(inner) != len(ranks):
            continue
        for j, rank in zip(inner, ranks, strict=True):
            out[j] = replace(evs[j], rank=rank, rank_from=(
                f"the CheckpointException {'rank ' + str(e.rank) if e.rank is not None else ''}"
                f" reported names rank {rank} for it").replace("  ", " "))
    return out


def _spawned_ranks(evs: list[Event]) -> list[Event]:
    """The lines of the traceback mp.spawn reported for its child N ("-- Process N
    terminated with the following error:", the scanner's ``spawn_process``) are rank N's
    where N is a global rank: on one node, as the agent's local rank (_local_is_global).
    A node of a larger job (its ranks' own lines name others, or its launch command a node
    rank of 1 or more or several nodes: X4_nccl_no_socket_interface_wrong_ifname_node2)
    leaves them unnamed."""
    marked = {p for e in evs
              if e.rank is None and isinstance(p := e.data.get("spawn_process"), int)}
    if not marked or _several_nodes(evs):
        return evs
    given = {p for p in marked if _local_is_global(evs, p)}
    if not given:
        return evs
    return [replace(e, rank=p, rank_from=f"mp.spawn's report of process {p} (one node)")
            if e.rank is None and (p := e.data.get("spawn_process")) in given else e
            for e in evs]


def _several_nodes(evs: list[Event]) -> bool:
    """The log's launch says this is one node of several (a node rank above 0, nnodes > 1)."""
    return any((e.get_int("node_rank") or 0) > 0 or (e.get_int("nnodes") or 0) > 1
               for e in evs if e.kind in (EventKind.NODE_RANK, EventKind.LAUNCH_LAYOUT))


def _first_failure(evs: list[Event]) -> tuple[list[Event], Event | None]:
    """The failure torchrun's summary calls first. Without a summary block (a cut log), the
    agent's "failed (exitcode: N) local_rank: R" line names the first rank it saw die: it is
    marked as the root failure."""
    failures = [e for e in evs if e.kind is EventKind.TORCHRUN_FAILURE]
    if failures:
        return _not_teardown(_earliest_roots(evs), failures)
    agents = [i for i, e in enumerate(evs) if e.kind is EventKind.AGENT_FAILED
              and e.data.get("exit_code")]
    if not agents:
        # another launcher's report of the rank that died (Composer's "Rank 0 crashed with
        # exit code 1"): the first one names the root, as torchrun's agent line does
        agents = [i for i, e in enumerate(evs) if e.kind is EventKind.PROCESS_EXIT
                  and e.data.get("launcher") and e.data.get("exit_code")
                  and (e.rank is not None or _legacy_launch(e))]
    if not agents:
        return evs, None
    i = agents[0]
    first = evs[i]
    if _legacy_launch(first):
        evs = _unnamed_legacy_report(evs, first)
    rank = first.rank
    if rank is None and not _legacy_launch(first) \
            and _local_is_global(evs, first.get_int("local_rank")):
        rank = first.get_int("local_rank")
    evs[i] = replace(first, rank=rank, data={**first.data, "first": True})
    return evs, evs[i]


def _earliest_roots(evs: list[Event]) -> list[Event]:
    """Several nodes' torchrun summaries in one log each name their own first failure: the
    job's is the earliest by the records' time, not the first in the file; the others are
    no longer roots. Roots of one second all stay (rules_crash.at_once reads them)."""
    roots = [e for e in evs if e.kind is EventKind.TORCHRUN_FAILURE and e.data.get("first")]
    times = [e.get_str("time") for e in roots]
    if len({e.get_str("host") for e in roots}) < 2 or not all(times):
        return evs
    earliest = min(times)
    later = {id(e) for e in roots if e.get_str("time") > earliest}
    return [replace(e, data={**e.data, "first": False, "after_first": earliest})
            if id(e) in later else e for e in evs]


def _unnamed_legacy_report(evs: list[Event], report: Event) -> list[Event]:
    """The floor's copy of the legacy launcher's report read the same --local_rank: it
    names no rank either (_legacy_launch)."""
    return [replace(e, rank=None, rank_from="") if e.kind is EventKind.FLOOR
            and (e.source, e.lineno) == (report.source, report.lineno) else e for e in evs]


def _legacy_launch(e: Event) -> bool:
    """torch.distributed.launch (torch < 1.9) raising CalledProcessError for a child that
    failed. Its ``cmd`` is the loop variable of the spawning loop: the LAST child's command
    whichever child failed (torch/distributed/launch.py, v1.8: ``raise
    subprocess.CalledProcessError(returncode=process.returncode, cmd=cmd)`` after ``for
    local_rank in range(0, args.nproc_per_node): ... cmd = [...]``), as DeepSpeed's launcher,
    derived from it: its --local_rank names no failed rank, it says the node ran that many
    plus one processes (_one_node_world)."""
    return e.data.get("launcher") == "torch.distributed.launch" and "local_rank" in e.data


def _local_is_global(evs: list[Event], local: int | None) -> bool:
    """The agent's "local_rank: L" is the global rank on one node only. Where the ranks'
    own lines carry only higher global ranks and never L's (a pod or node of a larger job
    whose one rank prints "[rank3]:" while its agent says local_rank 0), L is not a rank
    of this log: the failure is left unnamed rather than pinned on rank L. Only a rank's
    own failure lines count: on one node, rank 1's banner or its reset connection after
    rank 0 died says nothing against rank 0."""
    if local is None:
        return False
    # a rank's fallout (a reset connection) may be all a single node's survivor printed
    own = {e.rank for e in evs if e.rank is not None and not e.rank_from and e.is_failure
           and e.kind not in _REPORTS and e.kind not in CASCADE}
    return not own or local in own or min(own) < local


# reports about a rank by someone else (a launcher, the kernel, the floor), not its own lines
_REPORTS = frozenset({EventKind.TORCHRUN_FAILURE, EventKind.HOST_OOM, EventKind.AGENT_FAILED,
                      EventKind.FLOOR, EventKind.PROCESS_EXIT})


def _not_teardown(evs: list[Event], failures: list[Event]) -> tuple[list[Event], Event | None]:
    """torchrun's "first observed failure" is the earliest by timestamp, and ranks that left
    no error file all carry the moment torchrun noticed them: a rank torchrun itself stopped
    with SIGTERM can then be named first while the rank that really died (SIGKILL, SIGABRT,
    an exit code) is listed under "Failures" (seen on torch 2.13: rank 1 SIGKILLed, rank 0's
    -15 called the root cause). A SIGTERM is the root only when every failure is one."""
    first = next((e for e in failures if e.data.get("first")), None)
    if first is None or first.data.get("exit_code") != -15:
        return evs, first
    real = next((e for e in failures if e.data.get("exit_code") not in (-15, None)), None)
    if real is None:
        return evs, first
    swapped = {id(first): replace(first, data={**first.data, "first": False}),
               id(real): replace(real, data={**real.data, "first": True,
                                             "torchrun_named_first": first.rank})}
    evs = [swapped.get(id(e), e) for e in evs]
    return evs, swapped[id(real)]


def _versions(version_events: list[Event]) -> dict[str, str]:
    """The first version of each component the logs print."""
    versions: dict[str, str] = {}
    for e in version_events:
        for key in ("nccl", "torch", "python", "cuda"):
            if key in e.data:
                versions.setdefault(key, e.typed(key, str))
    return versions


def _one_per_failed_rank(evs: list[Event]) -> list[Event]:
    """The same exception printed once by each process torchrun's summary (or srun's line
    for tasks that are ranks) says failed (all with one exit code), none of the copies
    with a rank: each copy is one of those ranks'. Which copy is whose cannot be told and
    does not matter: they say the same. Processes printing at once into one stream
    interleave their tracebacks: one whose exception line was lost in the tangle (or glued
    to another's) still counts as a copy."""
    records, failed = _failed_ranks(evs)
    unranked = [i for i, e in enumerate(evs) if e.kind is EventKind.EXCEPTION and e.rank is None]
    lost = [i for i, e in enumerate(evs) if e.kind is EventKind.TRACEBACK and e.rank is None
            and e.data.get("interleaved")]
    said = _one_exception([evs[i] for i in unranked])
    if len(failed) < 2 or len(unranked) + len(lost) != len(failed) or said is None \
            or len({e.get_int("exit_code") for e in records}) != 1:
        return evs
    by = "torchrun's summary" if records[0].kind is EventKind.TORCHRUN_FAILURE \
        else "srun's report"
    return _copies_ranked(evs, unranked, lost, failed, said, by)


# a process's own error that every process of a job may print once, the same words
_COPIED = (EventKind.EXCEPTION, EventKind.CUDA_OOM)
_DIGITS = re.compile(r"\d+")


def _one_per_process(evs: list[Event]) -> list[Event]:
    """The same error printed once by every process of a world whose size the log tells,
    none of the copies with a rank and no rank named with an error of its own: each copy
    is one rank's (which is whose cannot be told and does not matter). The world: one
    node's DeepSpeed layout ("nnodes=1, num_local_procs=2"); or mp.spawn's children on
    one node that each failed while starting (Python's spawn could not unpickle the
    target, X37_mpspawn_notebook_fn_not_picklable_4ranks): each failed once, so each copy
    is one child. Copies of a CUDA OOM differ only in their numbers (the GPU's index);
    a traceback whose exception line was lost in the tangle of two printing at once
    counts as a copy (X25_megads_2rank_vocab_path_filenotfound)."""
    if any(e.rank is not None and _own_failure(e) for e in evs) or _several_nodes(evs):
        return evs
    copies = [i for i, e in enumerate(evs) if e.rank is None and e.kind in _COPIED]
    lost = [i for i, e in enumerate(evs) if e.kind is EventKind.TRACEBACK and e.rank is None
            and e.data.get("interleaved")]
    world, why = _world_of_copies(evs, copies, lost)
    if world < 2 or len(copies) + len(lost) != world:
        return evs
    out = list(evs)
    copy = evs[copies[0]]
    for i, rank in zip(sorted(copies + lost), range(world)):
        out[i] = (replace(copy, lineno=evs[i].lineno, rank=rank,
                          rank_from=f"{why}: one copy each (this one's exception line lost)")
                  if i in lost else
                  replace(evs[i], rank=rank, rank_from=f"{why}: the same error once each"))
    return out


def _world_of_copies(evs: list[Event], copies: list[int], lost: list[int]) -> tuple[int, str]:
    """How many processes the copies at ``copies`` (and the tracebacks at ``lost``) may be
    one each of, and why; 0 where they are not copies of one error or the log does not
    size the world."""
    # an OOM's copies differ in their numbers only (the GPU's index); any other error's
    # copies say the very same words
    shapes = {(evs[i].kind, _DIGITS.sub("#", evs[i].get_str("exception"))
               if evs[i].kind is EventKind.CUDA_OOM else evs[i].get_str("exception"))
              for i in copies}
    if len(shapes) != 1 or lost and evs[copies[0]].kind is not EventKind.EXCEPTION:
        return 0, ""
    world = _one_node_world(evs)
    if world:
        return world, f"the launcher's layout: {world} ranks on one node"
    if all(evs[i].data.get("spawn_bootstrap") for i in copies) and not lost:
        return len(copies), (f"{len(copies)} spawned processes on one node, each failed "
                             "while starting")
    return 0, ""


def _failed_ranks(evs: list[Event]) -> tuple[list[Event], list[int]]:
    """The launcher's reports of failed ranks and the ranks: torchrun's summary records, or
    srun's one line for tasks that are ranks ("tasks 0-2: Exited with exit code 1")."""
    records = [e for e in evs if e.kind is EventKind.TORCHRUN_FAILURE and e.rank is not None]
    if records:
        return records, sorted({e.rank for e in records if e.rank is not None})
    records = [e for e in evs if e.kind is EventKind.FLOOR and e.data.get("tasks")][:1]
    tasks = records[0].data.get("tasks") if records else None
    return records, [t for t in tasks if isinstance(t, int)] if isinstance(tasks, list) else []


def _copies_ranked(evs: list[Event], unranked: list[int], lost: list[int], failed: list[int],
                   said: str, by: str) -> list[Event]:
    """``evs`` with each copy (an exception line, or a traceback whose line was lost) given
    one failed rank."""
    out = list(evs)
    copy = next(evs[i] for i in unranked if evs[i].get_str("exception") == said)
    for i, rank in zip(sorted(unranked + lost), failed):
        if i in lost:  # its exception line is the one the others printed
            out[i] = replace(copy, lineno=evs[i].lineno, rank=rank,
                             rank_from=f"{by}: one traceback per failed rank, "
                                       "printed at once (its exception line lost)")
        else:  # (a copy glued to the next one's first word says the same)
            out[i] = replace(evs[i], rank=rank, data={**evs[i].data, "exception": said},
                             rank_from=f"{by}: one identical traceback per failed rank")
    return out


def _one_exception(evs: list[Event]) -> str | None:
    """The exception every one of ``evs`` says (a copy with another's first word glued on
    says it too), or None."""
    said = sorted({e.get_str("exception") for e in evs}, key=len)
    if not said or not all(x.startswith(said[0]) for x in said):
        return None
    return said[0]


def _attribute_unprefixed(evs: list[Event], root_rank: int | None) -> list[Event]:
    """Give torchrun's first failed rank the root-cause lines that carry no rank.

    A C++ abort or an error before init_process_group prints no ``[rankN]:`` prefix. When
    torchrun says rank R failed first and no prefixed line blames R, those lines are R's.
    """
    if root_rank is None:
        return evs
    if any(e.rank == root_rank for e in evs if e.kind not in CASCADE
           and e.kind not in _REPORTS):
        return evs
    each = _each_raisers_own(evs, root_rank)
    return [each[id(e)] if id(e) in each else
            replace(e, rank=root_rank, rank_from="torchrun's summary (line carries no rank)")
            if e.rank is None and e.kind not in _REPORTS and not launchers_own(e)
            and not e.kind.value.startswith("desync_")
            else e for e in evs]


def _each_raisers_own(evs: list[Event], root_rank: int) -> dict[int, Event]:
    """Identical exceptions with no rank, as many as the ranks torchrun's summary says
    exited with an error code of their own (not the SIGTERM it sent the others): one
    each, the first observed failure's first. Two ranks refusing one config raise the
    same ValueError; giving both to the first named one rank and dropped the other."""
    raisers = [root_rank] + [e.rank for e in evs if e.kind is EventKind.TORCHRUN_FAILURE
                             and e.rank not in (None, root_rank) and not e.data.get("first")
                             and isinstance(code := e.data.get("exit_code"), int) and code > 0]
    raised = [e for e in evs if e.kind is EventKind.EXCEPTION and e.rank is None]
    if len(raisers) < 2 or len(raised) != len(raisers) or len({e.text for e in raised}) != 1:
        return {}
    why = (f"torchrun's summary: {len(raisers)} ranks exited with an error code, "
           f"{len(raised)} identical tracebacks carry no rank")
    return {id(e): replace(e, rank=r, rank_from=why)
            for e, r in zip(raised, raisers, strict=True) if r is not None}


# Frames of the launcher's own process (torchrun's entry point, the elastic agent)
_LAUNCHER_FRAMES = ("/torchrun:", "torch/distributed/run.py:", "torch/distributed/launch.py:",
                    "torch/distributed/elastic/")


def launchers_own(e: Event) -> bool:
    """The launcher's line, not a worker's: its teardown of the other workers ("Sending
    process P closing signal SIGTERM") and its own traceback (ChildFailedError's, cut
    before its last line or not). Given to the failed rank, they made the rank look like
    it died of what it felt, and its death went unexplained."""
    if e.kind is EventKind.TEARDOWN:
        return True
    # raised in the agent (its rendezvous losing the store when another node's agent went):
    # the launcher's, whatever the exception; elastic/utils/ also runs in the workers
    at = e.get_str("raised_at", "")
    return e.kind in (EventKind.TRACEBACK, EventKind.EXCEPTION) and "elastic/utils/" not in at \
        and any(f in at for f in _LAUNCHER_FRAMES)


# A shell script's own line failing ("slurm_script: line 372: python: command not found"),
# or a helper it ran through sudo, env or another shell ("sudo: cpupower: command not
# found", an MLPerf run's set-up)
_SCRIPT_LINE = re.compile(r"(?:\bline \d+: .*|^(?:sudo|env|bash|sh|zsh)(?:: \d+)?: \S+)"
                          r": command not found$")


def _outlived(evs: list[Event]) -> list[Event]:
    """c10d's client warns of each connect that failed and tries again ("[W socket.cpp:697]
    [c10d] The client socket has failed to connect to [localhost]:40111 (errno: 99 ...)"),
    and a program may log a banner at an error level ("CRITICAL:root:PRETRAINING"): where
    the job's progress follows them (its losses, its word that training completed) they did
    not stop it (XI3_ijepa_in100_4rank_pretrain_healthy: 300 epochs after both)."""
    def outlived(e: Event) -> bool:
        warned = e.kind in (EventKind.CONNECT_TIMEOUT, EventKind.CONN_REFUSED) \
            and e.data.get("level") == "W"
        logged = e.kind is EventKind.FLOOR and e.data.get("pattern") == "python_logging.error"
        return (warned or logged) and went_on_after(evs, e)
    return [replace(e, kind=EventKind.OUTLIVED) if outlived(e) else e for e in evs]


def _done_then_trained(evs: list[Event]) -> list[Event]:
    """A trainer's completion line that its own losses follow (in the same log) ended a
    part of the run (a phase, a fold), not the run: no rule takes it for the job's end."""
    last_loss: dict[str, int] = {}
    for e in evs:
        if e.kind is EventKind.LOSS_VALUE:
            last_loss[e.source] = max(last_loss.get(e.source, 0), e.lineno)
    return [e for e in evs if e.kind is not EventKind.JOB_DONE
            or e.lineno > last_loss.get(e.source, 0)]


def _script_went_on(evs: list[Event], seen: list[Event]) -> list[Event]:
    """A batch script's command that was not found, after which two or more ranks printed
    (without `set -e` the script went on and launched the job: a helper command of its
    set-up failed, not the launch), or after the trainer said its training completed (a
    step of the script after the job, such as an evaluation it starts next), and srun's
    report of a step's task that ended before the trainer said it completed: not the
    job's failure (rules_crash says them as warnings). The ranks that printed are those
    of the events after it and of the scanner's census (``seen``: a rank's lines no rule
    reads, such as its warnings, count too)."""
    out = list(evs)
    # the trainer said it finished: whatever was not found before did not stop the launch
    done_at = {e.source: e.lineno for e in evs if e.kind is EventKind.JOB_DONE}
    done = bool(done_at)
    for i, e in enumerate(evs):
        if e.kind is EventKind.FAMILY_START and e.rank is None and _SCRIPT_LINE.search(e.text) \
                and (done or len(_printed_after(e, evs[i + 1:], seen)) >= 2):
            out[i] = replace(e, kind=EventKind.SCRIPT_WENT_ON)
        elif _helper_refused(e) and (done or len(_ran_after(e, evs[i + 1:], seen)) >= 2):
            # a helper of the set-up refused its command line ("conda: error: argument
            # COMMAND: invalid choice: 'activate'", XH9_megatron_ds_2node_nccl_socket_abort)
            # and the script went on to launch the job, whose ranks then printed
            out[i] = replace(e, kind=EventKind.SCRIPT_WENT_ON)
        elif _step_report(e) and e.lineno < done_at.get(e.source, -1):
            # srun reports a step's task when the step ends: one reported before the
            # trainer's completion line (of the same log) ended an earlier step of the
            # script (a set-up helper), not the training that then ran and completed
            out[i] = replace(e, kind=EventKind.SCRIPT_WENT_ON, rank=None, rank_from="")
    return out


def _step_report(e: Event) -> bool:
    return e.kind is EventKind.FLOOR and e.data.get("pattern") == "slurm.task"


# the launchers' own parsers' names in argparse's "PROG: error: ..."
LAUNCHER_PROG = re.compile(r"(?i)^(?:torchrun|accelerate\b.*|deepspeed)$")


def _helper_refused(e: Event) -> bool:
    """A program's own command-line refusal (argparse's "PROG: error: ...") with no rank,
    by a helper of the set-up: not a Python script (the trainer's is the ranks' own
    failure), not a launcher (one node's launcher refusing while another's ranks start
    and wait is the job's failure)."""
    prog = e.get_str("prog")
    return e.kind is EventKind.CLI_ERROR and e.rank is None and bool(prog) \
        and not prog.split()[0].endswith(".py") and not LAUNCHER_PROG.search(prog)


def _ran_after(e: Event, later: list[Event], seen: list[Event]) -> set[int]:
    """The ranks that printed after ``e``: their own lines, not a launcher's report of them
    (torchrun's summary names the ranks that died of ``e``)."""
    return _printed_after(e, [x for x in later if x.kind not in _REPORTS], seen)


def _printed_after(e: Event, later: list[Event], seen: list[Event]) -> set[int]:
    ranks = {x.rank for x in later if x.rank is not None}
    return ranks | {x.rank for x in seen
                    if x.rank is not None and x.source == e.source and x.lineno > e.lineno}


def _one_process(evs: list[Event]) -> list[Event]:
    """A job torch.nn.DataParallel ran is one process driving every GPU (a script started
    with plain ``python`` on a multi-GPU node, where DDP needs a launcher), as is one whose
    framework says it starts its process group with one worker: where no line names any
    rank, every line is rank 0's. DataParallel inside the ranks of a launched job shows
    their prefixes, and is left alone."""
    one = next((e for e in evs if e.kind is EventKind.ONE_PROCESS), None)
    if one is None or any(e.rank is not None for e in evs):
        return evs
    why = "a world of one worker" if one.data.get("workers") == 1 else "torch.nn.DataParallel"
    return [replace(e, rank=0, rank_from=f"one process: {why}") for e in evs]


def _left_by_elimination(evs: list[Event]) -> list[Event]:
    """One node's DeepSpeed job, its world known from the launcher's layout ("nnodes=1,
    num_local_procs=2"), whose ranks but one are named only waiting (a watchdog timeout, a
    peer's lost connection) while the root error carries no rank (DeepSpeed prints none):
    the error is the one rank left's (XG6_deepspeed_llava_rank0_oom_peer_watchdog: a CUDA
    OOM with no rank, rank 1's watchdog timeout, two ranks). A named rank with an error of
    its own, a rank beyond the world, or two ranks left: nothing is given."""
    procs = _one_node_world(evs)
    # named by their own lines (waiting), not by a launcher's report of them
    named = {e.rank for e in evs if e.rank is not None and e.kind not in _REPORTS}
    if not procs or not named or max(named) >= procs:
        return evs
    left = set(range(procs)) - named
    if len(left) != 1 or any(e.rank is not None and _own_failure(e) for e in evs):
        return evs
    roots = {id(e) for e in evs if e.rank is None and _own_failure(e) and not launchers_own(e)}
    if not roots:
        return evs
    rank = left.pop()
    why = (f"DeepSpeed's layout: {procs} ranks on one node, every other one named only "
           "waiting")
    return [replace(e, rank=rank, rank_from=why) if id(e) in roots else e for e in evs]


def _one_node_world(evs: list[Event]) -> int:
    """The number of ranks of a job one launcher ran on one node, or 0: DeepSpeed's layout
    line, or torch.distributed.launch's CalledProcessError, whose command is its last
    child's (--local_rank=N: N + 1 processes) where nothing says the node is one of
    several."""
    layouts = {(e.get_int("nnodes"), e.get_int("num_local_procs"))
               for e in evs if e.kind is EventKind.LAUNCH_LAYOUT}
    if len(layouts) == 1:
        nnodes, procs = next(iter(layouts))
        return (procs or 0) if nnodes == 1 else 0
    last = {e.get_int("local_rank") for e in evs
            if e.kind is EventKind.PROCESS_EXIT and _legacy_launch(e)}
    if layouts or len(last) != 1 or _several_nodes(evs):
        return 0
    n = last.pop()
    return n + 1 if n is not None else 0


def _own_failure(e: Event) -> bool:
    """A failure line of the process itself: not a wait on a peer, not a launcher's report."""
    return e.is_failure and e.kind not in CASCADE and e.kind not in _REPORTS


def _node_local_ranks(evs: list[Event]) -> list[Event]:
    """DeepSpeed's launcher names the failed process by its ``--local_rank``: the global
    rank only on one node. Its layout line ("nnodes=2, num_local_procs=1, node_rank=1")
    says which: one node's log maps local rank L to node_rank x num_local_procs + L. A log
    of several nodes' launchers (srun running one per node) cannot tell whose report is
    whose: the rank is left unknown rather than guessed, unless every node's launcher
    reported local rank L (X11_deepspeed_cpu_adam_jit_build_gcc_too_old: two nodes, both
    failed): together those reports are rank n x num_local_procs + L of every node n.
    The launcher's own failure line (the floor's) goes with its report."""
    layouts = {(e.get_int("nnodes"), e.get_int("num_local_procs"), e.get_int("node_rank"))
               for e in evs if e.kind is EventKind.LAUNCH_LAYOUT}
    if not layouts or all((n or 0) <= 1 for n, _, _ in layouts):
        return evs
    given = _every_node_reported(evs, layouts)
    # one layout line: this log is one node's (several: several launchers, no mapping)
    _, procs, node = next(iter(layouts)) if len(layouts) == 1 else (None, None, None)

    def mapped(e: Event) -> Event:
        if not _deepspeed_report(e):
            return e
        if (e.source, e.lineno) in given:
            rank, why = given[(e.source, e.lineno)]
            return replace(e, rank=rank, rank_from=why)
        local = e.get_int("process")
        if e.kind is not EventKind.PROCESS_EXIT or local is None or e.rank != local:
            return e
        if procs is not None and node is not None:
            return replace(e, rank=node * procs + local,
                           rank_from=f"DeepSpeed's layout: node_rank {node}")
        return replace(e, rank=None)

    return [mapped(e) for e in evs]


def _deepspeed_report(e: Event) -> bool:
    return (e.kind is EventKind.PROCESS_EXIT and e.data.get("launcher") == "deepspeed"
            or e.kind is EventKind.FLOOR and e.data.get("pattern") == "deepspeed.launcher_exit")


def _every_node_reported(evs: list[Event], layouts: set[tuple[int | None, int | None, int | None]]
                         ) -> dict[tuple[str, int], tuple[int, str]]:
    """(source, line) of each report of a local rank that every node's launcher reported,
    with the rank it is given; which node's report is which cannot be told, so they are
    given in node order (the set of ranks is what is known)."""
    sizes = {(n, p) for n, p, _ in layouts}
    if len(sizes) != 1:
        return {}
    nnodes, procs = sizes.pop()
    nodes = sorted({node for _, _, node in layouts if node is not None})
    if nnodes is None or procs is None or nodes != list(range(nnodes)):
        return {}
    by_local: dict[int, list[tuple[str, int]]] = {}
    for e in evs:
        local = e.get_int("process")
        if e.kind is EventKind.PROCESS_EXIT and e.data.get("launcher") == "deepspeed" \
                and local is not None:
            by_local.setdefault(local, []).append((e.source, e.lineno))
    why = ("DeepSpeed's layouts: every node's launcher reported local rank {0} (which "
           "report is whose cannot be told)")
    return {at: (node * procs + local, why.format(local))
            for local, ats in by_local.items() if len(ats) == nnodes
            for node, at in zip(nodes, ats)}


@dataclass(frozen=True)
class Verdict:
    """A finding, the events it rests on, and where in the log its first line is."""

    finding: Finding
    events: tuple[Event, ...]
    first: int


@dataclass(frozen=True)
class Rule:
    """One small triage rule.

    ``folds``: kinds of events this rule's finding explains as fallout (counted on the
    first finding, not reported on their own). ``alone``: the rule only runs when no
    earlier rule found anything (a timeout is the finding only if nothing caused it).
    """

    name: str
    run: Callable[[EventIndex, tuple[Verdict, ...]], list[Verdict]]
    folds: frozenset[EventKind] = frozenset()
    alone: bool = False


def verdict(ix: EventIndex, fid: str, title: str, evs: list[Event],
            evidence: Mapping[str, object] | None = None, ranks: list[int] | None = None,
            severity: Severity | Literal[""] = "") -> Verdict:
    """A verdict for ``evs``; the exit code torchrun reported for its ranks is added."""
    evs = sorted(evs, key=ix.pos)
    ev = evidence_of(evs)
    ev.update(evidence or {})
    ranks = ranks_of(evs) if ranks is None else ranks
    if "exit_code" not in ev:
        for f in ix.root_failures:
            if f.rank in ranks:
                ev["exit_code"] = f.data.get("exit_code")
                if f.data.get("signal"):
                    ev.setdefault("signal", f.data["signal"])
    first = min((ix.pos(e) for e in evs), default=0)
    title = " ".join(title.split())  # a quoted line's padding and box drawing stay out
    return Verdict(Finding(fid, title, ranks=ranks, evidence=ev, severity=severity),
                   tuple(evs), first)


def explained_ranks(earlier: tuple[Verdict, ...]) -> set[int | None]:
    return {e.rank for v in earlier for e in v.events}


def used(earlier: tuple[Verdict, ...]) -> set[int]:
    return {id(e) for v in earlier for e in v.events}


def ranks_of(evs: Iterable[Event]) -> list[int]:
    return sorted({e.rank for e in evs if e.rank is not None})


def fmt(evs: Iterable[Event]) -> str:
    return format_ranks(ranks_of(evs))


def rank_or(evs: Iterable[Event], unknown: str) -> str:
    """"rank N" for the ranks of ``evs``, else ``unknown`` ("a rank", "the others"): a
    title never says "rank ?" for a rank its lines do not give."""
    ranks = fmt(evs)
    return f"rank {ranks}" if ranks else unknown


def on_rank(evs: Iterable[Event]) -> str:
    """" on rank N", or nothing where the lines give no rank."""
    ranks = fmt(evs)
    return f" on rank {ranks}" if ranks else ""


def short_where(where: str) -> str:
    """``/long/path/train.py:88 in step`` -> ``train.py:88``."""
    return where.split(" in ")[0].rsplit("/", 1)[-1]


def cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n].rstrip() + " ..."


def evidence_of(evs: list[Event]) -> dict[str, object]:
    seen: set[str] = set()
    lines = []
    for e in evs:
        q = e.quote()
        if q not in seen:
            seen.add(q)
            lines.append(q)
    ev: dict[str, object] = {"first_seen": evs[0].where if evs else ""}
    ev["lines"] = lines[:_MAX_LINES]
    if len(lines) > _MAX_LINES:
        ev["more_lines"] = len(lines) - _MAX_LINES
    where = next((e.data["where"] for e in evs if e.data.get("where")), "")
    if where:
        ev["where"] = where
    return ev
