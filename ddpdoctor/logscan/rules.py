"""Rules: the real error texts of PyTorch 2.13 / gloo / NCCL / DataLoader / torchrun -> events.

Every pattern is taken from the text torch 2.13 prints (its C++ strings and Python source,
checked against logs recorded on this machine, see tests/fixtures/logs/README.md); NCCL and
CUDA texts, which a CPU build cannot print, from PyTorch's source and recorded user logs.
An event is a fact read from one line ("rank 1: DataLoader worker killed by signal: Bus
error"); deciding what caused what is triage's job, not this module's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.logscan.reader import RawLine, split_rank_prefix


@dataclass
class Event:
    """One fact read from a log line."""

    kind: str
    source: str
    lineno: int
    rank: int | None
    text: str
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.source}:{self.lineno}"

    def quote(self, width: int = 300) -> str:
        """``file:line: [rankN] text`` for the evidence, cut to ``width``."""
        who = f"[rank{self.rank}] " if self.rank is not None else ""
        if self.data.get("rank_from"):
            who = f"[rank{self.rank} per torchrun's summary] "
        text = self.text if len(self.text) <= width else self.text[:width] + " ..."
        return f"{self.where}: {who}{text}"


@dataclass(frozen=True)
class Rule:
    kind: str
    needle: str  # a literal every match contains: a cheap test before the regex
    pattern: re.Pattern[str]
    extract: Callable[[re.Match[str]], dict[str, Any]] | None = None


def _ranks(text: str) -> list[int]:
    return [int(r) for r in re.findall(r"\d+", text)]


def _signal_name(exitcode: int) -> str:
    import signal

    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


def _size(m: re.Match[str], *names: str) -> dict[str, Any]:
    return {n: m.group(n) for n in names if m.group(n)}


_SIZE = r"[\d.]+ ?(?:[KMGT]i?B|bytes|B)"

RULES: list[Rule] = [
    # --- DDP (reducer.cpp) ---
    Rule("ddp_reduction", "Expected to have finished reduction",
         re.compile(r"Expected to have finished reduction in the prior iteration"),
         lambda m: {"static_graph": "static_graph" in m.string}),
    Rule("unused_names", "did not receive grad",
         re.compile(r"Parameters which did not receive grad for rank (?P<rank>\d+): (?P<names>.+)"),
         lambda m: {"param_rank": int(m["rank"]),
                    "names": [n.strip() for n in m["names"].split(",") if n.strip()]}),
    Rule("unused_indices", "did not receive grad",
         re.compile(r"Parameter indices which did not receive grad for rank (?P<rank>\d+): "
                    r"(?P<idx>[\d ]+)"),
         lambda m: {"param_rank": int(m["rank"]), "indices": _ranks(m["idx"])}),
    # --- DataLoader (torch/utils/data, DataLoader.cpp signal handlers) ---
    Rule("dl_killed", "is killed by signal",
         re.compile(r"DataLoader worker \(pid (?P<pid>\d+)\) is killed by signal: "
                    r"(?P<sig>[^.]+)\."),
         lambda m: {"pid": int(m["pid"]), "signal": m["sig"].strip()}),
    Rule("dl_exit", "exited unexpectedly with exit code",
         re.compile(r"DataLoader worker \(pid (?P<pid>\d+)\) exited unexpectedly with exit code "
                    r"(?P<code>-?\d+)"),
         lambda m: {"pid": int(m["pid"]), "exit_code": int(m["code"])}),
    Rule("dl_exited", "exited unexpectedly",
         re.compile(r"DataLoader worker \(pid\(s\) (?P<pids>[\d, ]+)\) exited unexpectedly$"),
         lambda m: {"pids": _ranks(m["pids"])}),
    Rule("dl_timeout", "DataLoader timed out",
         re.compile(r"DataLoader timed out after (?P<s>[\d.]+) seconds"),
         lambda m: {"timeout_s": float(m["s"])}),
    Rule("dl_worker_exception", "in DataLoader worker process",
         re.compile(r"Caught (?P<exc>\w+) in DataLoader worker process (?P<w>\d+)"),
         lambda m: {"exception_type": m["exc"], "worker": int(m["w"])}),
    Rule("bus_error_worker", "Unexpected bus error encountered in worker",
         re.compile(r"Unexpected bus error encountered in worker"), None),
    # --- shared memory ---
    Rule("shm_alloc", "shared memory",
         re.compile(r"unable to allocate shared memory\(shm\) for file <(?P<file>[^>]*)>: "
                    r"(?P<why>.*)"),
         lambda m: {"file": m["file"], "reason": m["why"].strip()}),
    Rule("shm_alloc", "unable to write to file",
         re.compile(r"unable to write to file <(?P<file>/torch_[^>]*)>: (?P<why>No space left.*)"),
         lambda m: {"file": m["file"], "reason": m["why"].strip()}),
    Rule("shm_alloc", "/dev/shm",
         re.compile(r"(?:Error while creating shared memory segment|failed to extend) "
                    r"(?P<file>/dev/shm/\S+)"),
         lambda m: {"file": m["file"], "reason": "NCCL could not create its shared memory"}),
    # --- memory ---
    Rule("cuda_oom", "CUDA out of memory",
         re.compile(r"CUDA out of memory\. Tried to allocate (?P<tried>" + _SIZE + r")"
                    r"(?:.*?GPU (?P<gpu>\d+) has a total capac(?:i)?ty of (?P<total>" + _SIZE
                    + r") of which (?P<free>" + _SIZE + r") is free)?"
                    r"(?:.*?this process has (?P<in_use>" + _SIZE + r") memory in use)?"
                    r"(?:.*?Of the allocated memory (?P<allocated>" + _SIZE + r") is allocated "
                    r"by PyTorch, and (?P<reserved_unallocated>" + _SIZE + r") is reserved)?"
                    r"(?:.*?\(GPU (?P<gpu_old>\d+); (?P<total_old>" + _SIZE
                    + r") total capacity; (?P<allocated_old>" + _SIZE + r") already allocated; "
                    r"(?P<free_old>" + _SIZE + r") free)?"),
         lambda m: {
             "tried_to_allocate": m["tried"],
             "gpu": int(m["gpu"] or m["gpu_old"]) if (m["gpu"] or m["gpu_old"]) else None,
             "total_capacity": m["total"] or m["total_old"],
             "free": m["free"] or m["free_old"],
             **_size(m, "in_use", "reserved_unallocated"),
             "allocated_by_pytorch": m["allocated"] or m["allocated_old"],
         }),
    Rule("cpu_oom", "can't allocate memory",
         re.compile(r"DefaultCPUAllocator: can't allocate memory: you tried to allocate "
                    r"(?P<bytes>\d+) bytes"),
         lambda m: {"tried_to_allocate_bytes": int(m["bytes"])}),
    Rule("host_oom", "of memory",
         re.compile(r"Out of memory: Killed process (?P<pid>\d+) \((?P<comm>[^)]*)\)"),
         lambda m: {"pid": int(m["pid"]), "process": m["comm"]}),
    Rule("host_oom", "oom",
         re.compile(r"(?:Detected (?P<n>\d+) oom[-_]kill event|oom-kill:|invoked oom-killer)"),
         None),
    Rule("host_oom", "OOMKilled", re.compile(r"\bOOMKilled\b"), None),
    # --- NCCL (ProcessGroupNCCL.cpp, TraceUtils.h, NCCLUtils) ---
    Rule("nccl_watchdog", "Watchdog caught collective operation timeout",
         re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), "
                    r"OpType=(?P<op>\w+)(?:, NumelIn=(?P<nin>\d+), NumelOut=(?P<nout>\d+))?"
                    r"(?:, Timeout\(ms\)=(?P<timeout>\d+))?\) ran for (?P<ran>\d+) milliseconds"),
         lambda m: {"seq": int(m["seq"]), "op": m["op"],
                    "numel_in": int(m["nin"]) if m["nin"] else None,
                    "timeout_ms": int(m["timeout"]) if m["timeout"] else None,
                    "ran_ms": int(m["ran"])}),
    Rule("desync_missing", "are the lagging ranks",
         re.compile(r"ranks \[(?P<ranks>[\d, ]+)\] are the lagging ranks that caused this timeout"),
         lambda m: {"ranks": _ranks(m["ranks"])}),
    Rule("desync_header", "caused the desync are",
         re.compile(r"the lagging/dead/mismatched ranks that caused the desync are"), None),
    Rule("desync_unfinished", "didn't finish collective",
         re.compile(r"\[(?P<ranks>[\d, ]+)\] joined but didn't finish collective #(?P<seq>\d+)"),
         lambda m: {"ranks": _ranks(m["ranks"]), "seq": int(m["seq"])}),
    Rule("desync_unjoined", "didn't join collective",
         re.compile(r"\[(?P<ranks>[\d, ]+)\] finished collective #(?P<seq>\d+), but didn't join "
                    r"collective #(?P<next>\d+)"),
         lambda m: {"ranks": _ranks(m["ranks"]), "seq": int(m["seq"]), "next": int(m["next"])}),
    Rule("desync_timeout_at", "Timeout at collective",
         re.compile(r"\[(?P<rank>\d+)\] Timeout at collective: (?P<op>\w+), #(?P<seq>\d+)"),
         lambda m: {"at_rank": int(m["rank"]), "op": m["op"], "seq": int(m["seq"])}),
    Rule("desync_started", "] started ",
         re.compile(r"^\s*\[(?P<ranks>[\d, ]+)\] started (?P<op>\w+)\s*$"),
         lambda m: {"ranks": _ranks(m["ranks"]), "op": m["op"]}),
    Rule("nccl_remote", "remote process exited or there was a network error",
         re.compile(r"remote process exited or there was a network error"), None),
    # The second line of a NCCL DistBackendError: part of the error above, not another one.
    Rule("nccl_detail", "ncclRemoteError", re.compile(r"^ncclRemoteError:"), None),
    Rule("nccl_detail", "ncclSystemError", re.compile(r"^ncclSystemError:"), None),
    Rule("nccl_system", "unhandled system error",
         re.compile(r"unhandled system error"), None),
    # --- gloo / c10d ---
    Rule("mismatch_detail", "Detected mismatch between collectives",
         re.compile(r"Detected mismatch between collectives on ranks\. Rank (?P<a>\d+) is running "
                    r"collective: (?P<ca>.*?), but Rank (?P<b>\d+) is running collective: "
                    r"(?P<cb>.*)"),
         lambda m: {"collectives": {int(m["a"]): _fingerprint(m["ca"]),
                                    int(m["b"]): _fingerprint(m["cb"])}}),
    Rule("size_mismatch", "Received data size doesn't match expected size",
         re.compile(r"(?:(?P<got>\d+) vs (?P<want>\d+)\. )?Received data size doesn't match "
                    r"expected size"),
         lambda m: {"received_bytes": int(m["got"]) if m["got"] else None,
                    "expected_bytes": int(m["want"]) if m["want"] else None}),
    Rule("monitored_barrier", "failed to pass monitoredBarrier",
         re.compile(r"Ranks? (?P<ranks>[\d, ]+) failed to pass monitoredBarrier in (?P<ms>\d+) ms"),
         lambda m: {"missing_ranks": _ranks(m["ranks"]), "timeout_ms": int(m["ms"])}),
    Rule("gloo_timeout", "Timed out waiting",
         re.compile(r"Timed out waiting (?P<ms>\d+)ms for (?P<op>\w+) operation to complete"),
         lambda m: {"timeout_ms": int(m["ms"]), "op": m["op"]}),
    Rule("store_timeout", "wait timeout after",
         re.compile(r"wait timeout after (?P<ms>\d+)ms, keys: (?P<keys>\S+)"),
         lambda m: {"timeout_ms": int(m["ms"]), "keys": m["keys"],
                    "missing_ranks": _store_key_ranks(m["keys"])}),
    Rule("connect_timeout", "The client socket has",
         re.compile(r"The client socket has (?:timed out after (?P<ms>\d+)ms while trying to "
                    r"connect to|failed to connect to any network address of) "
                    r"\((?P<host>[^,]+), (?P<port>\d+)\)"),
         lambda m: {"host": m["host"], "port": int(m["port"]),
                    "timeout_ms": int(m["ms"]) if m["ms"] else None}),
    Rule("conn_refused", "onnection refused",
         re.compile(r"[Cc]onnection refused"), None),
    Rule("addr_in_use", "lready in use",
         re.compile(r"(?:failed to listen on any local network address\. port: (?P<port>\d+))?"
                    r".*?[Aa]ddress already in use"),
         lambda m: {"port": int(m["port"]) if m["port"] else _port_in(m.string)}),
    Rule("conn_reset", "Connection reset by peer",
         re.compile(r"Connection reset by peer"), None),
    Rule("conn_closed", "onnection closed by",
         re.compile(r"Connection closed by (?:remote )?peer"), None),
    Rule("broken_pipe", "Broken pipe", re.compile(r"Broken pipe"), None),
    # --- NaN / Inf (anomaly mode, clip_grad_norm_) ---
    Rule("grad_nan", "returned nan values",
         re.compile(r"Function '(?P<fn>\w+)' returned nan values in its (?P<i>\d+)\w* output"),
         lambda m: {"function": m["fn"], "output": int(m["i"])}),
    Rule("grad_nonfinite_norm", "is non-finite",
         re.compile(r"The total norm of order (?P<order>[\w.-]+) for gradients from `parameters` "
                    r"is non-finite"),
         lambda m: {"norm_order": m["order"]}),
    # --- process deaths ---
    Rule("cpp_abort", "terminate called after throwing",
         re.compile(r"terminate called after throwing an instance of '(?P<type>[^']+)'"),
         lambda m: {"type": m["type"]}),
    Rule("agent_failed", "exitcode",
         re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<lr>\d+) \(pid: "
                    r"(?P<pid>\d+)\)"),
         lambda m: {"exit_code": int(m["code"]), "local_rank": int(m["lr"]),
                    "pid": int(m["pid"])}),
]

# The reader's prefilter: a line is looked at only if it holds one of these. Every rule
# needle and every line the scanner's state machines need contains one (a test checks).
KEYWORDS: tuple[bytes, ...] = (
    b"rror", b"xception", b"raceback", b'File "', b"imed out", b"imeout", b"onnection",
    b"receive grad", b"shared memory", b"/dev/shm", b"of memory", b"oom", b"OOM",
    b"allocate memory",
    b"lready in use", b"ollective", b"] started ", b"ranks", b"mismatch", b"monitoredBarrier",
    b"terminate called", b"exitcode", b"rank      :", b"host      :", b"traceback :",
    b"Root Cause", b"Failures:", b"======", b"Broken pipe", b"nan values", b"non-finite",
    b"DataLoader", b"unable to write to file", b"The client socket", b"finished reduction",
    b"killed by signal", b"exited unexpectedly", b"desync", b"data size",
)

_EXCEPTION = re.compile(
    r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|EnforceNotMet))"
    r"(?::\s?(.*))?$")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)')
_NCCL_RANK = re.compile(r"\[(?:PG [^\]]*?)?Rank (\d+)\]")
# Frames that are not the user's code: libraries, the stdlib, console-script launchers.
_LIBRARY_PATH = re.compile(r"(?:site-packages|dist-packages|/lib/python\d[\d.]*/|^<frozen "
                           r"|/bin/[^/]+$)")
_SUMMARY_FIELD = re.compile(r"^\s{2}(?P<key>time|host|rank|exitcode|error_file|traceback)\s*: ?"
                            r"(?P<val>.*)$")
_MAX_FRAMES = 64
MAX_EVENTS_PER_KIND = 200


def _fingerprint(text: str) -> dict[str, Any]:
    """The parts of a CollectiveFingerPrint a person compares: op, shapes, dtypes, seq."""
    out: dict[str, Any] = {}
    for key, pat in (("op", r"OpType=(\w+)"), ("seq", r"SequenceNumber=(\d+)"),
                     ("shape", r"TensorShape=\[([^\]]*)\]"), ("dtype", r"TensorDtypes=(\w+)")):
        m = re.search(pat, text)
        if m:
            out[key] = int(m.group(1)) if key == "seq" else m.group(1)
    return out


def _store_key_ranks(keys: str) -> list[int]:
    # c10d's store barrier waits on one key per rank ("/default_pg/0//cpu//0/1": rank 1);
    # the trailing number of each listed key names a rank that never arrived.
    out = []
    for key in keys.strip("[]").split(","):
        m = re.search(r"/(\d+)$", key.strip())
        if m:
            out.append(int(m.group(1)))
    return out


def _port_in(text: str) -> int | None:
    m = re.search(r"port[: =]+(\d+)", text)
    return int(m.group(1)) if m else None


def match_rules(body: str) -> list[tuple[Rule, re.Match[str]]]:
    """Every rule that matches ``body`` (the line without its rank prefix)."""
    out = []
    for rule in RULES:
        if rule.needle in body:
            m = rule.pattern.search(body)
            if m:
                out.append((rule, m))
    return out


def is_library_frame(path: str) -> bool:
    return bool(_LIBRARY_PATH.search(path))


class LineScanner:
    """Turns the picked lines of one input into events.

    Keeps the little state real logs need: each rank's current traceback (to name the user
    file:line an exception came from), whether a rank is inside a DataLoader worker's
    re-raised traceback, and torchrun's ChildFailedError summary block.
    """

    def __init__(self, source: str, file_rank: int | None = None) -> None:
        self.source = source
        self.file_rank = file_rank
        self.events: list[Event] = []
        self._frames: dict[int | None, list[tuple[str, int, str]]] = {}
        self._in_worker: dict[int | None, int] = {}
        self._summary: str = ""  # "", "failures" or "root"
        self._record: dict[str, Any] = {}
        self._last: dict[tuple[str, int | None], tuple[int, Event]] = {}

    def feed(self, line: RawLine) -> None:
        rank, body = self._rank_and_body(line.text)
        stripped = body.strip()
        if self._summary_line(line, stripped, body):
            return
        if "Traceback (most recent call last)" in stripped:
            self._frames[rank] = []
            return
        fm = _FRAME.match(body)
        if fm:
            frames = self._frames.setdefault(rank, [])
            frames.append((fm["file"], int(fm["line"]), fm["fn"]))
            del frames[:-_MAX_FRAMES]
            return
        matches = match_rules(stripped)
        exc = _EXCEPTION.match(stripped)
        exc_data: dict[str, Any] = {}
        if exc:
            exc_data = self._exception_data(rank, exc.group(1), exc.group(2) or "")
        for rule, m in matches:
            data = rule.extract(m) if rule.extract else {}
            if exc_data:
                data.update(exc_data)
            ev_rank = rank
            if ev_rank is None and rule.kind in ("nccl_watchdog", "desync_timeout_at"):
                nm = _NCCL_RANK.search(stripped)
                ev_rank = int(nm.group(1)) if nm else None
            self._emit(rule.kind, line, ev_rank, stripped, data)
        if exc and not matches:
            name = exc.group(1)
            if name.endswith("ChildFailedError"):
                return  # torchrun's own traceback: the summary block says more
            self._emit("exception", line, rank, stripped, exc_data)
        for rule, m in matches:
            if rule.kind == "dl_worker_exception":
                # The next exception of this rank is the worker's, re-raised.
                self._in_worker[rank] = int(m["w"])

    def _rank_and_body(self, text: str) -> tuple[int | None, str]:
        rank = None
        body = text
        # `[default1]:[rank1]: ...` under --tee: the innermost [rankN] is the global rank.
        for _ in range(3):
            r, rest = split_rank_prefix(body)
            if r is None:
                break
            rank, body = r, rest
        if rank is None:
            rank = self.file_rank
        return rank, body

    def _exception_data(self, rank: int | None, name: str, message: str) -> dict[str, Any]:
        frames = self._frames.pop(rank, [])
        data: dict[str, Any] = {"exception": f"{name}: {message}".strip().rstrip(":")}
        user = [f for f in frames if not is_library_frame(f[0])]
        if user:
            file, lineno, fn = user[-1]
            data["where"] = f"{file}:{lineno} in {fn}"
        if frames:
            file, lineno, fn = frames[-1]
            data["raised_at"] = f"{file}:{lineno} in {fn}"
        if any("torch/utils/data/" in f[0] for f in frames):
            data["in_dataloader"] = True
        if rank in self._in_worker:
            data["in_dataloader_worker"] = self._in_worker.pop(rank)
        return data

    def _summary_line(self, line: RawLine, stripped: str, body: str) -> bool:
        """torchrun's ChildFailedError block; True when the line belonged to it."""
        if stripped.startswith("Root Cause (first observed failure)"):
            self._summary, self._record = "root", {}
            return True
        if stripped == "Failures:":
            self._summary, self._record = "failures", {}
            return True
        if not self._summary:
            return False
        if stripped.startswith("=====") or stripped.startswith("-----"):
            if stripped.startswith("="):
                self._summary = ""
            return True
        fm = _SUMMARY_FIELD.match(body)
        if fm is None:
            return False
        key, val = fm["key"], fm["val"].strip()
        if key == "host":
            self._record = {"host": val}
        elif key == "rank":
            m = re.match(r"(\d+) \(local_rank: (\d+)\)", val)
            if m:
                self._record["rank"] = int(m.group(1))
                self._record["local_rank"] = int(m.group(2))
        elif key == "exitcode":
            m = re.match(r"(-?\d+)(?: \(pid: (\d+)\))?", val)
            if m and "rank" in self._record:
                code = int(m.group(1))
                data = dict(self._record, exit_code=code, first=self._summary == "root")
                if m.group(2):
                    data["pid"] = int(m.group(2))
                if code < 0:
                    data["signal"] = _signal_name(code)
                self._emit("torchrun_failure", line, data["rank"], stripped, data)
        elif key == "traceback" and self.events and self.events[-1].kind == "torchrun_failure":
            if not val.startswith("To enable traceback"):
                self.events[-1].data["traceback"] = val
        return True

    def _emit(self, kind: str, line: RawLine, rank: int | None, text: str,
              data: dict[str, Any]) -> None:
        # A log with a million identical timeouts must not become a million events: past
        # the cap, repeats are only counted on the last kept event.
        key = (kind, rank)
        count, last = self._last.get(key, (0, None))
        if last is not None and count >= MAX_EVENTS_PER_KIND:
            last.data["repeats"] = last.data.get("repeats", 0) + 1
            return
        event = Event(kind, self.source, line.lineno, rank, text, data)
        self.events.append(event)
        self._last[key] = (count + 1, event)
