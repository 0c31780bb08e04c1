"""Triage rule for DataLoader workers: how a worker failed, and when what it raised is the
Dataset's own code (the rank's crash, not the workers')."""

from __future__ import annotations

import re

from ddpdoctor.core.findings import format_ranks
from ddpdoctor.diagnose.events import Event
from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.index import EventIndex, Rule, Verdict, ranks_of, verdict

_DL_ORDER = [K.DL_KILLED, K.DL_EXIT, K.DL_TIMEOUT, K.DL_WORKER_EXCEPTION, K.EXCEPTION,
             K.SHM_ALLOC, K.DL_WORKER_SIGNAL, K.DL_EXITED]


def _worker_events(ix: EventIndex) -> list[Event]:
    """Every event that says a worker failed, in log order."""
    worker_exc = [e for e in ix.of(K.EXCEPTION) if "in_dataloader_worker" in e.data
                  or "dataloader_start" in e.data or "tensor_handoff" in e.data]
    # A worker that dies mid-send shows up in the rank as ConnectionResetError raised
    # inside the DataLoader's own frames: the worker died, not a peer rank.
    lost = [e for e in ix.of(K.CONN_RESET, K.CONN_CLOSED) if e.data.get("in_dataloader")]
    lost += [e for e in ix.of(K.EXCEPTION, K.TRACEBACK) if _pipe_closed(e)]
    dl = (ix.of(K.DL_KILLED, K.DL_EXIT, K.DL_TIMEOUT, K.DL_WORKER_EXCEPTION, K.DL_WORKER_SIGNAL)
          + worker_exc + [e for e in ix.of(K.SHM_ALLOC) if "in_dataloader_worker" in e.data]
          + lost)
    return sorted(dl, key=ix.pos)


# what reading a pipe whose other end died raises (multiprocessing's Connection.recv)
_PIPE_CLOSED = frozenset({"EOFError", "ConnectionResetError", "BrokenPipeError",
                          "ConnectionAbortedError"})


def _pipe_closed(e: Event) -> bool:
    """The rank's read of its workers' queue (``_try_get_data``) ended because a worker's
    end closed: EOFError or a reset (a worker killed mid-send, by the OOM killer or
    SIGKILL), or a traceback cut there whose exception line never came (the rank's
    stderr lost as it died: "lost sys.stderr")."""
    if not e.data.get("dataloader_queue"):
        return False
    if e.kind is K.TRACEBACK:  # cut in the read itself, not in what a worker sent
        at = e.get_str("raised_at", "")
        return at.endswith(" in _try_get_data") or "multiprocessing/connection.py" in at
    return e.get_str("exception", "").split(":", 1)[0].rsplit(".", 1)[-1] in _PIPE_CLOSED


def dataloader(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    dl = _worker_events(ix)
    exited = ix.of(K.DL_EXITED)
    if not dl and not exited:
        return []
    dl = dl or exited
    if _stopped_first(ix, dl):
        return []  # the job was stopped from outside: the workers went with it
    raised = [e for e in dl if e.kind is K.DL_WORKER_EXCEPTION or "in_dataloader_worker" in e.data]
    family = _raised_family(raised) if raised else None
    if family == "worker_code" and len(raised) == len(dl) and not exited:
        return [_dataset_crash(ix, raised)]
    first = min(dl, key=lambda e: (_DL_ORDER.index(e.kind) if e.kind in _DL_ORDER else 99,
                                   ix.pos(e)))
    describe = _dl_connection_lost if _pipe_closed(first) else _DL_DESCRIBE.get(first.kind)
    title, ev = describe(first, dl) if describe else _dl_raised(first, dl, family)
    ranks = ranks_of([e for e in dl + exited if e.kind is not K.DL_WORKER_SIGNAL])
    return [verdict(ix, "DATALOADER_WORKER_FAILURE", title, dl + exited, ev, ranks=ranks or None)]


# a stop's signal, by the name the DataLoader's message gives it (strsignal's)
_STOP_SIGNALS = frozenset({"Terminated", "Interrupt", "Hangup", "SIGTERM", "SIGINT", "SIGHUP"})


def _stopped_first(ix: EventIndex, dl: list[Event]) -> bool:
    """Every worker died of a stop's signal after the job itself was signalled from outside
    (Lightning's "Received SIGTERM: 15", a launcher's): the stop, not the workers, ended
    the job (the crash rules say it)."""
    said = ix.of(K.LAUNCHER_SIGNALLED)
    return bool(said) and all(e.kind is K.DL_KILLED and e.get_str("signal") in _STOP_SIGNALS
                              and ix.pos(e) > ix.pos(said[0]) for e in dl)


# One function per way a DataLoader worker fails: (the first event, all of them) -> (title,
# evidence).
def _dl_killed(first: Event, dl: list[Event]) -> tuple[str, dict[str, object]]:
    ev: dict[str, object] = {"signal": first.data["signal"]}
    if first.data["signal"] == "Killed":
        ev["hint"] = ("SIGKILL: most often the host's OOM killer (confirm with `dmesg -T | "
                      "grep -i oom`); fewer workers, a smaller batch or prefetch_factor, or "
                      "more memory")
        return ("a DataLoader worker was killed by SIGKILL (most often the host's OOM "
                "killer: check dmesg)", ev)
    return f"a DataLoader worker was killed by signal: {first.data['signal']}", ev


def _dl_exit(first: Event, dl: list[Event]) -> tuple[str, dict[str, object]]:
    return (f"a DataLoader worker exited with code {first.data['exit_code']}",
            {"exit_code": first.data["exit_code"]})


def _dl_timeout(first: Event, dl: list[Event]) -> tuple[str, dict[str, object]]:
    return (f"DataLoader timed out after {first.data['timeout_s']:g} s waiting for a batch",
            {"timeout_s": first.data["timeout_s"]})


def _dl_worker_signal(first: Event, dl: list[Event]) -> tuple[str, dict[str, object]]:
    return f"a DataLoader worker died of a {first.data['what']}", {"signal": first.data["what"]}


def _dl_exited(first: Event, dl: list[Event]) -> tuple[str, dict[str, object]]:
    pids = ", ".join(str(p) for p in first.ints("pids", []))
    hint = ("the worker died without a Python error: killed by a signal (the host's "
            "OOM killer: check dmesg; a bus error: /dev/shm too small in a container)"
            " — rerun with num_workers=0 to see the error in the main process")
    return (f"DataLoader worker (pid {pids}) exited unexpectedly, no exit code or signal",
            {"hint": hint})


def _dl_connection_lost(first: Event, dl: list[Event]) -> tuple[str, dict[str, object]]:
    return "a DataLoader worker died (the rank lost its connection to it)", {}


def _dl_raised(first: Event, dl: list[Event],
               family: str | None) -> tuple[str, dict[str, object]]:
    errs = [e for e in dl if e.kind in (K.EXCEPTION, K.SHM_ALLOC)]
    msg = errs[0].data.get("exception", errs[0].text) if errs else first.text
    ev: dict[str, object] = {}
    if errs and errs[0].data.get("where"):
        ev["where"] = errs[0].data["where"]
    if errs and errs[0].data.get("dataloader_start"):
        if "pickle" in str(msg).lower():
            ev["hint"] = ("with the spawn or forkserver start method each worker gets the "
                          "Dataset pickled: a lambda or local function it holds cannot be "
                          "(make it a module-level function)")
        return f"the DataLoader could not start its worker processes: {msg}", ev
    if family:
        ev["family"] = family
    if errs and errs[0].data.get("tensor_handoff"):
        ev["hint"] = ("torch.multiprocessing hands each batch from a DataLoader worker to its "
                      "rank through shared memory (/dev/shm) and, for the file-descriptor "
                      "strategy, a socket in the temp directory: free the disk it names, point "
                      "TMPDIR at one with room, or lower num_workers")
        return f"a DataLoader worker could not pass a batch on ({msg})", ev
    return f"a DataLoader worker raised {msg}", ev


_DL_DESCRIBE = {K.DL_KILLED: _dl_killed, K.DL_EXIT: _dl_exit, K.DL_TIMEOUT: _dl_timeout,
                K.DL_WORKER_SIGNAL: _dl_worker_signal, K.DL_EXITED: _dl_exited,
                K.CONN_RESET: _dl_connection_lost, K.CONN_CLOSED: _dl_connection_lost}


# What a worker raised that is the host's limits, not the Dataset's code: shared memory,
# memory, descriptors, disk space, a signal
_RESOURCE = re.compile(r"(?i)memory|\bshm\b|bus error|killed|signal|too many open files|"
                       r"errno:? ?(?:12|24|28)\b|no space left|\((?:12|24|28)\)")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
# a type alone that may be either (a RuntimeError is also how shm exhaustion is raised)
_EITHER = frozenset({"RuntimeError", "OSError", "MemoryError", "Exception", "SystemError"})


def _is_resource(message: str) -> bool:
    """What a worker raised is the host's limits (memory, shared memory, descriptors,
    disk, a signal), read with any quoted path or key taken out ('/data/memory/1.jpg')."""
    return bool(_RESOURCE.search(_QUOTED.sub("", message)))


def _dataset_code(raised: list[Event]) -> bool:
    """The workers ran, and the Dataset's code (``__getitem__``, a transform, the collate
    function) raised an ordinary error in one: read by the original exception where the
    log has it, else by its type alone."""
    msgs = [e.get_str("exception", "") for e in raised if e.kind is K.EXCEPTION]
    if any(msgs):
        return not any(_is_resource(m) for m in msgs if m)
    types = {str(e.data.get("exception_type", "")) for e in raised}
    return bool(types) and not types & _EITHER and not any(_is_resource(t) for t in types)


def _raised_family(raised: list[Event]) -> str | None:
    """The family the next step reads: the Dataset's own code, the host's limits, or
    neither where only an ambiguous type is known."""
    if _dataset_code(raised):
        return "worker_code"
    said = [e.get_str("exception", "") for e in raised] + [
        str(e.data.get("exception_type", "")) for e in raised]
    return "worker_resource" if any(_is_resource(m) for m in said if m) else None


def _dataset_crash(ix: EventIndex, raised: list[Event]) -> Verdict:
    """The worker re-raised in its rank, and the rank died of it: a crash in the Dataset's
    code, to fix there (DATALOADER_WORKER_FAILURE is for workers that cannot run)."""
    exc = [e for e in raised if e.kind is K.EXCEPTION and e.data.get("exception")]
    msg = exc[0].get_str("exception") if exc else str(raised[0].data.get("exception_type"))
    ev: dict[str, object] = {"family": "dataset_code", "exception": msg,
                             "hint": "the Dataset's own code (__getitem__, a transform, the "
                                     "collate_fn) raised in a DataLoader worker and the rank "
                                     "re-raised it; with num_workers=0 it raises in the main "
                                     "process, where a debugger can stop at it"}
    where = next((e.get_str("where") for e in exc if e.data.get("where")), "")
    if where:
        ev["where"] = where
    ranks = ranks_of(raised)
    who = f"rank {format_ranks(ranks)}" if ranks else "a rank"
    at = f" at {where}" if where else ""
    return verdict(ix, "RANK_CRASHED", f"{who} died of its Dataset's error in a DataLoader "
                   f"worker: {msg}{at}", raised, ev, ranks=ranks)


RULE = Rule("dataloader", dataloader, frozenset({K.DL_EXITED, K.CONN_RESET}))
