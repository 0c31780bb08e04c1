"""Lines -> events: the knowledge base applied line by line, plus the little state real logs
need (each rank's traceback, a DataLoader worker's re-raised error, torchrun's summary)."""

from __future__ import annotations

import re
from dataclasses import replace

from ddpdoctor.core.signames import killed_by
from ddpdoctor.diagnose import floor
from ddpdoctor.diagnose.events import INFORMATIONAL, TAIL, Event, EventKind
from ddpdoctor.diagnose.kb import match_line
from ddpdoctor.diagnose.kb.signature import Signature
from ddpdoctor.diagnose.reader import TIME_HEAD, RawLine, split_rank_prefix

_EXCEPTION = re.compile(
    r"^((?:[A-Za-z_]\w*\.)*\w*(?:Error|Exception|Interrupt|EnforceNotMet|Iteration|"
    r"GeneratorExit))(?::\s?(.*))?$")
# The same exception line behind a prefix a logger or launcher added ("opt.0 [stderr] ",
# "2023-04-29 06:01:12 [pid 28936] [uuid] ", "[1,12]<stderr>:"): the name follows a bracket,
# an angle bracket or a colon, and is a CamelCase class name ending in Error/Exception.
_PREFIXED_EXCEPTION = re.compile(
    r"[\]>:]\s*((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|EnforceNotMet))(?::\s?(.*))?$")
# mp.spawn's "process N terminated with signal S": N is its process index
_SPAWN_SIGNAL = "spawn.process_signal"
# Python's header above an exception a thread other than the main one raised
_THREAD_HEAD = "Exception in thread "
# a traceback frame where an exception's message should be (interleaved output)
_FRAME_MESSAGE = re.compile(r'\s*File "[^"]+", line \d+')
# The same in torchelastic's error record (the JSON its error_handler logs and writes to
# the error file): '"message": "RendezvousClosedError: ",'
_RECORDED_EXCEPTION = re.compile(
    r'^"message":\s*"((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception))(?::\s?(.*?))?",?$')
# Raised by launchers (torchrun, mp.spawn, torch.distributed.launch, deepspeed, accelerate)
# about a child that died: not the rank's own error (the child's lines, or the floor's
# reading of this one, say what happened).
# mp.spawn's ProcessRaisedException carries the child's own traceback after its header
_LAUNCHER_EXCEPTIONS = ("ChildFailedError", "ProcessExitedException", "CalledProcessError",
                        "ProcessRaisedException")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)\s*$')
_NCCL_RANK = re.compile(r"\[(?P<pg>PG [^\]]*?)?Rank (\d+)\]")
# The default process group's own rank is the global rank; a subgroup's is not.
_DEFAULT_PG = re.compile(r"^PG (?:ID )?0\b|default_pg")
# "[E ProcessGroupNCCL.cpp:489]", "[E1206 18:44:16.99 socket.cpp:1023]": c10d's error lines.
_C10D_ERROR = re.compile(r"^\[E\d*(?: [\d:.]+)* ?[\w.]+\.(?:cpp|hpp|h):\d+\]")
# Frames that are not the user's code: libraries, the stdlib, console-script launchers.
# Side tools a training loop reports to: their tracebacks (a dashboard that is down) are
# printed and handled, the job goes on. Weak evidence, never a failure on its own.
_SIDE_TOOL = re.compile(r"/(?:visdom|wandb|mlflow|comet_ml|neptune|tensorboard\w*|clearml|"
                        r"aim|swanlab)/")
# a side tool's own command-line program (its console script): the process is the tool
_SIDE_PROGRAM = re.compile(r"/bin/(?:visdom|wandb|mlflow|comet|neptune|tensorboard|clearml|"
                           r"aim|swanlab)$")
_LIBRARY_PATH = re.compile(r"(?:site-packages|dist-packages|/lib/python\d[\d.]*/|^<frozen "
                           r"|/bin/[^/]+$)")
_SUMMARY_FIELD = re.compile(r"^\s{2}(?P<key>time|host|rank|exitcode|error_file|traceback)\s*: ?"
                            r"(?P<val>.*)$")
_SUMMARY_RANK = re.compile(r"^\s{2}rank\s*: \d+ \(local_rank: \d+\)")
_MAX_FRAMES = 64
MAX_EVENTS_PER_KIND = 200
# The words the scanner's own state machines need, beyond the signatures' needles.
SCANNER_NEEDLES = ("rror", "xception", "Interrupt", "raceback", 'File "', "Root Cause",
                   # the builtins whose names end in none of the above
                   "StopIteration", "StopAsyncIteration", "GeneratorExit",
                   "Failures:", "======", "exitcode", "rank      :", "host      :",
                   "time      :",
                   "traceback :", ".cpp:")


# mp.spawn's report of the child that raised (torch/multiprocessing/spawn.py,
# ProcessRaisedException: "-- Process %d terminated with the following error:" and the
# child's traceback): the traceback after it is that process's; index._spawned_ranks says
# whether its index is the rank (one node)
_SPAWN_RAISED = re.compile(r"-- Process (\d+) terminated with the following error:")


def _signal_name(exitcode: int) -> str:
    return killed_by(exitcode) or f"signal {-exitcode}"


def is_library_frame(path: str) -> bool:
    return bool(_LIBRARY_PATH.search(path))


# torch.distributed's collectives and point-to-point calls, as their frames name them
_COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast",
    "broadcast_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor",
    "all_to_all", "all_to_all_single", "barrier", "monitored_barrier", "gather",
    "gather_object", "scatter", "scatter_object_list", "send", "recv", "_all_gather_base",
    "_reduce_scatter_base"})


# Python's report of an exception it could not raise and went on from (sys.unraisablehook:
# a __del__, an atexit callback, a weakref callback, a ctypes callback, a thread's start):
# the traceback that follows is printed, not raised
_IGNORED = re.compile(r"^Exception ignored (?:in|on|while)\b|^Error in atexit\._run_exitfuncs:$")
# Loops of the standard library that print an exception's traceback and go on to the next
# callback (the process's exit status is not theirs to change): (file, function) of the
# traceback's outermost frame
_PRINTS_AND_GOES_ON = (("multiprocessing/util.py", "_run_finalizers"),
                       ("atexit", "_run_exitfuncs"))
# a header's exception line (an ignored report's, a thread's) comes within its
# traceback's length: two lines a frame, _MAX_FRAMES frames kept
_TRACEBACK_SPAN = 2 * _MAX_FRAMES + 8
# the lines that chain a second traceback to the one before it
_CHAINED = ("During handling of the above exception", "The above exception was the direct "
            "cause")


# A log record's header at level W(arning) or I(nfo): torch._logging's and glog's
# "W0619 13:43:42.034000 237636 torch/_inductor/codecache.py:1045] ", c10's "[W619
# 13:43:12.371397423 ProcessGroupNCCL.cpp:936] ". A traceback inside such a record was
# logged by a program that went on (logger.warning(..., exc_info=True)), not raised
# A record its library logged at level W: c10d's "[W socket.cpp:663]" (older) and
# "[W1206 18:44:16.99 socket.cpp:1023]", glog's "W0619 13:43:42.034000 237636 f.py:1045]".
# The library went on (a connect it retries, a bind it tries on another family): a warning
_WARNING_RECORD = re.compile(r"^(?:\[W(?:\d{3,4} [\d:.]+)?\s*[^\]\s]*\.(?:cpp|hpp|h|py):\d+\]|"
                             r"W\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\])")
# what c10d's socket code logs at W and then retries (another address family, the next
# attempt until its timeout): only these are read as warnings by their level; a W record
# can also report a real stop (torchelastic's "Received 15 death signal")
_RETRIED = frozenset({EventKind.CONNECT_TIMEOUT, EventKind.CONN_REFUSED, EventKind.ADDR_IN_USE})
_LOGGED = re.compile(r"^(?:[WI]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\]|"
                     r"\[[WI]\d{3,4} \d\d:\d\d:\d\d\.\d+ [^\]]*\])")


# "main process first" blocks: YOLO's torch_distributed_zero_first, transformers' and
# accelerate's main_process_first / local_main_process_first
_MAIN_FIRST = re.compile(r"zero_first|main_process_first")


class LineScanner:
    """Turns the picked lines of one input into events (:attr:`events`, in log order)."""

    def __init__(self, source: str, file_rank: int | None = None) -> None:
        self.source = source
        self.file_rank = file_rank
        self.events: list[Event] = []
        self._frames: dict[int | None, list[tuple[str, int, str]]] = {}
        self._tb_line: dict[int | None, tuple[RawLine, str]] = {}  # each rank's open traceback
        # headers of tracebacks another header of the same stream cut before their exception
        # line: processes that share one stream with no rank prefix, printing at once
        self._waiting: dict[int | None, list[tuple[RawLine, str]]] = {}
        self._in_worker: dict[int | None, int] = {}
        # the lines of each rank's "Exception in thread" headers whose exception is to come
        self._thread_heads: dict[int | None, list[int]] = {}
        self._at = 0  # the line being read
        self._summary = ""  # "", "failures" or "root"
        self._record: dict[str, object] = {}
        self._record_time = ""  # a summary record's time: its first field, before its host
        self._last: dict[tuple[EventKind, int | None], tuple[int, int]] = {}
        # ranks whose next exception Python reported as ignored; and those whose last was
        self._ignoring: dict[int | None, int] = {}  # rank -> the header's line number
        self._ignored_last: set[int | None] = set()
        self._lent = ""  # where the current line's rank came from, when not the line
        self._seen: set[int] = set()  # ranks whose prefix a picked line carried
        # srun's tasks are a launcher's per node, not ranks (reader: diagnose/tasklabel.py)
        self.tasks_are_nodes = False
        self._spawned: int | None = None  # the mp.spawn child whose traceback follows
        self._spawn_ends = False  # its exception line was read: the report ends there

    def feed(self, line: RawLine) -> None:
        self._at = line.lineno
        rank, body = self._rank_and_body(line.printed)
        self._spawn_report(rank, body)
        before = len(self.events)
        self._read(line, rank, body)
        if rank is not None and rank not in self._seen and not self._lent \
                and rank != self.file_rank:
            self._census(line, rank, body, before)

    def _spawn_report(self, rank: int | None, body: str) -> None:
        """mp.spawn's header names the child whose traceback follows (unprefixed lines);
        the child's exception line ends it."""
        if self._spawn_ends:
            self._spawned, self._spawn_ends = None, False
        if rank is None and (m := _SPAWN_RAISED.match(body.strip())):
            self._spawned = int(m.group(1))

    def _census(self, line: RawLine, rank: int, body: str, before: int) -> None:
        """The first picked line a rank's prefix names: that rank ran and printed. Said by
        an event of the line where there is one, else by RANK_SEEN (the index reads it,
        index._script_went_on, and drops it: no rule sees it)."""
        self._seen.add(rank)
        if all(e.rank != rank for e in self.events[before:]):
            self._emit(EventKind.RANK_SEEN, line, rank, body.strip(), {})

    def _read(self, line: RawLine, rank: int | None, body: str) -> None:
        stripped = body.strip()
        if self._structure(line, rank, stripped, body):
            return
        matches = list(match_line(stripped, line.cont))
        exc = _exception(stripped)
        exc_data: dict[str, object] = {}
        side_program = raised_in_side_tool = False
        if exc:
            if rank not in self._tb_line and self._waiting.get(rank):
                # an interleaved traceback's exception line (a header closing a traceback
                # must not take one: only an exception line does)
                self._tb_line[rank] = self._waiting[rank].pop(0)
            exc_data = self._exception_data(rank, exc.group(1), exc.group(2) or "")
            # the scanner's own mark, not a field of the line: kept out of every event's data
            side_program = bool(exc_data.pop("side_tool", False))
            raised_in_side_tool = bool(exc_data.pop("in_side_tool", False))
            if self._logged_exception(line, rank, stripped, exc_data, bool(matches)) or \
                    self._ends_ignored_report(line, rank, stripped, exc_data):
                return
        matches = self._side_message(line, rank, stripped, matches,
                                     (side_program, raised_in_side_tool))
        self._emit_matches(line, rank, stripped, matches, exc_data)
        # a line's context (a launch command's node rank, a version) does not say what the
        # exception on it is: only a failure's signature replaces the exception event
        told = [m for m in matches if m[0].kind not in INFORMATIONAL]
        if exc and not told:
            if exc.group(1).endswith(_LAUNCHER_EXCEPTIONS):
                return  # a launcher reporting a child's death: the floor reads the report
            # a traceback from a side tool's own program, all in its files, is that tool
            # failing (the `wandb` command a batch script ran), not a rank
            self._emit(EventKind.SIDE_TRACEBACK if side_program else EventKind.EXCEPTION,
                       line, rank, stripped, exc_data)
        elif not told and not exc and _C10D_ERROR.match(stripped):
            self._emit(EventKind.ERROR_LINE, line,
                       self._line_rank(rank, self._nccl_rank(stripped)), stripped, {})
        self._floor(line, rank, stripped)
        for sig, data in matches:
            if sig.kind is EventKind.DL_WORKER_EXCEPTION:
                # The next exception of this rank is the worker's, re-raised.
                self._in_worker[rank] = _int(data["worker"])

    def _structure(self, line: RawLine, rank: int | None, stripped: str, body: str) -> bool:
        """A line that only frames others (a thread's header, torchrun's summary, a logged
        traceback's header, an ignored report's header, a traceback's header or frame):
        read for what it opens or closes; True when the line was one."""
        return (self._thread_head(rank, stripped) or self._summary_line(line, stripped, body)
                or _logged_traceback(stripped) or self._ignored_report(line, rank, stripped)
                or self._traceback_line(line, rank, stripped, body))

    def _under_thread_head(self, rank: int | None) -> bool:
        """The exception being read is under Python's "Exception in thread NAME:" (frames
        tangled with another thread's lose the threading frame that says so), within a
        traceback's length of it; the header is used up. A header whose exception line
        never came does not mark a later exception."""
        heads = [at for at in self._thread_heads.get(rank, []) if self._at - at <= _TRACEBACK_SPAN]
        self._thread_heads[rank] = heads[1:]
        return bool(heads)

    def _thread_head(self, rank: int | None, stripped: str) -> bool:
        """Python's header above a thread's traceback; True when the line was one. Two
        threads' headers can share a line ("Exception in thread Exception in thread
        Thread-2Thread-4:"): one exception line each follows."""
        if not stripped.startswith(_THREAD_HEAD):
            return False
        self._thread_heads.setdefault(rank, []).extend(
            [self._at] * stripped.count(_THREAD_HEAD))
        return True

    def _logged_exception(self, line: RawLine, rank: int | None, stripped: str,
                          exc_data: dict[str, object], matched: bool) -> bool:
        """An exception a warning record logged (the program went on): said as ignored."""
        if matched or not _LOGGED.match(stripped):
            return False
        self._emit(EventKind.IGNORED_EXCEPTION, line, rank, stripped, exc_data)
        return True

    def _emit_matches(self, line: RawLine, rank: int | None, stripped: str,
                      matches: list[tuple[Signature, dict[str, object]]],
                      exc_data: dict[str, object]) -> None:
        in_line = self._nccl_rank(stripped) if matches else None
        warned = bool(matches) and _WARNING_RECORD.match(stripped) is not None
        for sig, data in matches:
            if exc_data:
                data.update(exc_data)
            if warned and sig.kind in _RETRIED:
                data["level"] = "W"
            data["signature"] = sig.name
            line_rank = self._line_rank(rank, in_line)
            # "on rank N" in a library's own words (Megatron's rerun state machine), a
            # launcher's report of rank N name the rank; mp.spawn's process index is one
            # on one node only (index._spawned_ranks decides, as for its raised report)
            process = data.get("process", data.get("on_rank"))
            if sig.name == _SPAWN_SIGNAL and line_rank is None and isinstance(process, int):
                data["spawn_process"] = process
            elif line_rank is None and isinstance(process, int):
                line_rank = process
            self._emit(sig.kind, line, line_rank, stripped, data)

    def _floor(self, line: RawLine, rank: int | None, text: str) -> None:
        """The floor's verdict on the line, kept beside the knowledge base's: triage uses it
        only when no rule found an error (a failure no signature knows is never healthy)."""
        hit = floor.detect(text)
        if hit is None:
            return
        data: dict[str, object] = {"evidence": hit.evidence.value, "pattern": hit.pattern,
                                "oom": hit.oom}
        if hit.exit_code is not None:
            data["exit_code"] = hit.exit_code
        if hit.signal:
            data["signal"] = hit.signal
        named = hit.task if hit.rank is None and not self.tasks_are_nodes else hit.rank
        if rank is None and named is not None:
            rank = named
            data["rank_from"] = "the launcher's report"
            if hit.tasks and hit.rank is None:
                data["tasks"] = list(hit.tasks)  # every rank the line says failed
        self._emit(EventKind.FLOOR, line, rank, text, data)

    @staticmethod
    def _nccl_rank(text: str) -> tuple[int, bool] | None:
        """``[Rank N]`` / ``[PG 0 Rank N]`` in a c10d line: (N, whether it is global)."""
        m = _NCCL_RANK.search(text)
        if m is None:
            return None
        return int(m.group(2)), not m["pg"] or bool(_DEFAULT_PG.search(m["pg"]))

    def _line_rank(self, rank: int | None, in_line: tuple[int, bool] | None) -> int | None:
        """The line's rank: its torchrun prefix, else the global rank NCCL printed in it, else
        the file's rank, else a subgroup rank as the best there is."""
        if in_line is None or (rank is not None and rank != self.file_rank):
            return rank
        return in_line[0] if in_line[1] or rank is None else rank

    def _rank_and_body(self, body: str) -> tuple[int | None, str]:
        rank = None
        # `[default1]:[rank1]: ...` under --tee: the innermost [rankN] is the global rank.
        for _ in range(3):
            r, rest = split_rank_prefix(body)
            if r is None:
                break
            rank, body = r, rest
        self._lent = ""
        if rank is None and self._summary and "rank" in self._record:
            # a torchrun summary record's traceback (its frames and exception line) is its
            # rank's: the rank's own output may not be in the log at all
            rank = _int(self._record["rank"])
            self._lent = "torchrun's summary"
        if rank is None:
            rank = self.file_rank
        return rank, body

    def finish(self) -> list[Event]:
        """Close what the input left open (a traceback with no exception line); the events."""
        for rank in list(self._tb_line):
            self._close_traceback(rank)
        for rank, headers in self._waiting.items():
            for line, text in headers:  # interleaved tracebacks whose exception line was lost
                at = next((i for i, e in enumerate(self.events) if e.lineno > line.lineno),
                          len(self.events))
                self.events.insert(at, Event(EventKind.TRACEBACK, self.source, line.lineno,
                                             rank, text, {"interleaved": True}))
        return self.events

    def _traceback_line(self, line: RawLine, rank: int | None, stripped: str,
                        body: str) -> bool:
        """A traceback's header or one of its frames (kept for the exception line that
        closes it); True when the line was one."""
        if "Traceback (most recent call last)" in stripped:
            opened = self._tb_line.get(rank)
            if rank is None and self._frames.get(rank) and opened is not None \
                    and "Traceback (most recent" in opened[1]:
                # the exception lines come later, one per header (interleaved output); a
                # headless traceback (frames only: a logger printed it without its header
                # and exception line) is closed below with its frames
                self._waiting.setdefault(rank, []).append(self._tb_line.pop(rank))
            self._close_traceback(rank)
            self._frames[rank] = []
            self._tb_line[rank] = (line, stripped)
            return True
        fm = _FRAME.match(body)
        if fm is None:
            return False
        if rank not in self._tb_line and not self._frames.get(rank):
            # frames with no header above them: the log was cut inside a traceback
            self._tb_line[rank] = (line, stripped)
        frames = self._frames.setdefault(rank, [])
        frames.append((fm["file"], int(fm["line"]), fm["fn"]))
        del frames[:-_MAX_FRAMES]
        return True

    def _ends_ignored_report(self, line: RawLine, rank: int | None, stripped: str,
                             exc_data: dict[str, object]) -> bool:
        """The exception line of an ignored report: its exception, its message's families
        and the floor's reading of it are all Python's printout, not the rank's fate."""
        opened_at = self._ignoring.pop(rank, None)
        if exc_data.get("printed_by"):
            opened_at = line.lineno  # a finalizer loop printed it and went on
        if opened_at is None or line.lineno - opened_at > _TRACEBACK_SPAN:
            self._ignored_last.discard(rank)
            return False
        self._ignored_last.add(rank)
        self._emit(EventKind.IGNORED_EXCEPTION, line, rank, stripped, exc_data)
        return True

    def _ignored_report(self, line: RawLine, rank: int | None, stripped: str) -> bool:
        """Python's "Exception ignored in ..." header, or the line chaining a second
        traceback to an ignored one: the next exception of the rank is ignored too. True
        when the line was one of them."""
        if _IGNORED.match(stripped):
            self._ignoring[rank] = line.lineno
            self._emit(EventKind.IGNORED_EXCEPTION, line, rank, stripped, {})
            return True
        if rank in self._ignored_last and stripped.startswith(_CHAINED):
            self._ignoring[rank] = line.lineno
            return True
        return False

    def _close_traceback(self, rank: int | None) -> None:
        """A traceback whose exception line never came (its class name holds no keyword
        the reader looks for, or the log was cut): still a failure, with its frames."""
        opened = self._tb_line.pop(rank, None)
        frames = self._frames.get(rank)
        if opened is None or not frames:
            return
        if self._ignoring.pop(rank, None) is not None:
            self._frames.pop(rank, None)
            return  # an ignored report cut before its exception line
        line, text = opened
        data = self._exception_data(rank, "", "")
        data.pop("exception", None)
        data.pop("side_tool", None)  # any frame in a side tool decides what this is
        side = bool(data.pop("in_side_tool", False))
        self._emit(EventKind.SIDE_TRACEBACK if side else EventKind.TRACEBACK, line, rank, text,
                   data)

    def _exception_data(self, rank: int | None, name: str, message: str) -> dict[str, object]:
        opened = self._tb_line.pop(rank, None)
        headed = opened is not None and "Traceback (most recent" in opened[1]
        frames = self._frames.pop(rank, [])
        data: dict[str, object] = {"exception": f"{name}: {message}".strip().rstrip(":")}
        data.update(_placed(frames))
        data.update(_side_marks(frames, headed))
        loader = [f for f in frames if "torch/utils/data/" in f[0]]
        if loader:
            data["in_dataloader"] = True
            if _starts_workers(frames):
                data["dataloader_start"] = True
            if loader[-1][2] == "_try_get_data":
                # raised where the rank reads its workers' results off their queue
                data["dataloader_queue"] = True
        data.update(_process_marks(frames))
        coll = [f[2] for f in frames if f[0].endswith("distributed_c10d.py")
                and f[2] in _COLLECTIVES]
        if coll:
            # the collective the rank waited in when it failed: a peer's abort ends it
            data["in_collective"] = coll[-1]
        first = [f[2] for f in frames if _MAIN_FIRST.search(f[2])]
        if coll and first and any(f[2] == "__enter__" for f in frames):
            # the entry barrier of a "main process first" block: the others wait there
            # while the main process does the work (rules_crash.main_first_wait); the main
            # process's own barrier is on the way out (__exit__)
            data["main_first"] = first[-1]
        if self._under_thread_head(rank):
            data["in_thread"] = True
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
        if not self._summary and not self._headless_summary(body):
            return False
        if stripped.startswith("=====") or stripped.startswith("-----"):
            if stripped.startswith("="):
                self._summary = ""
            return True
        fm = _SUMMARY_FIELD.match(body)
        if fm is None:
            return False
        self._summary_field(line, stripped, fm["key"], fm["val"].strip())
        return True

    def _summary_field(self, line: RawLine, stripped: str, key: str, val: str) -> None:
        if key == "time":
            self._record_time = val
        elif key == "host":
            self._record = {"host": val}
            if self._record_time:
                self._record["time"] = self._record_time
                self._record_time = ""
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
                self._emit(EventKind.TORCHRUN_FAILURE, line, _int(data["rank"]), stripped, data)
        elif (key == "traceback" and self.events
              and self.events[-1].kind is EventKind.TORCHRUN_FAILURE
              and not val.startswith("To enable traceback")):
            last = self.events[-1]
            self.events[-1] = replace(last, data={**last.data, "traceback": val})

    def _side_message(self, line: RawLine, rank: int | None, stripped: str,
                      matches: list[tuple[Signature, dict[str, object]]],
                      marks: tuple[bool, bool]) -> list[tuple[Signature, dict[str, object]]]:
        """The matches of the line, none where it is the message of a side tool's traceback
        ("Connection refused" to a visdom that is down: not the job's rendezvous). ``marks``:
        the exception's traceback is the side tool's own program, any frame of it is in one.
        A side program's own traceback is told where its exception line is."""
        side_program, raised_in_side_tool = marks
        if not matches or not (side_program or raised_in_side_tool or self._in_side_tool(rank)):
            return matches
        if not side_program:
            self._emit(EventKind.SIDE_TRACEBACK, line, rank, stripped, {})
        return []

    def _in_side_tool(self, rank: int | None) -> bool:
        """Whether this rank's open traceback was raised inside a side tool (a dashboard)."""
        frames = self._frames.get(rank) if rank in self._tb_line else None
        return bool(frames) and any(_SIDE_TOOL.search(f[0]) for f in frames or [])

    def _headless_summary(self, body: str) -> bool:
        """A torchrun summary cut above its header: its first record is the failure
        torchrun saw first (unless one came before)."""
        if not _SUMMARY_RANK.match(body):
            return False
        self._summary = "failures" if any(
            e.kind is EventKind.TORCHRUN_FAILURE for e in self.events) else "root"
        self._record = {"host": ""}
        return True

    def _emit(self, kind: EventKind, line: RawLine, rank: int | None, text: str,
              data: dict[str, object]) -> None:
        # A log with a million identical timeouts must not become a million events: past
        # the cap, repeats are only counted on the last kept event.
        key = (kind, rank)
        count, at = self._last.get(key, (0, -1))
        if at >= 0 and count >= MAX_EVENTS_PER_KIND:
            kept = self.events[at]
            self.events[at] = replace(kept, repeats=kept.repeats + 1,
                                      tail_lines=(*kept.tail_lines, line.lineno)[-TAIL:])
            return
        if rank is None and self._spawned is not None:
            data = {**data, "spawn_process": self._spawned}
            self._spawn_ends |= "exception" in data
        self.events.append(Event(kind, self.source, line.lineno, rank, text, data,
                                 rank_from=self._lent))
        self._last[key] = (count + 1, len(self.events) - 1)


def _exception(stripped: str) -> re.Match[str] | None:
    """An exception line: bare, behind a logger's or launcher's prefix, or in an error
    record's JSON."""
    exc = (_EXCEPTION.match(stripped) or _PREFIXED_EXCEPTION.search(stripped)
           or _RECORDED_EXCEPTION.match(stripped))
    if exc is None and (t := TIME_HEAD.match(stripped)) is not None and t.end():
        # behind a time a collector put on one line (too few lines to learn it from:
        # "Dec 06 17:37:24 FileNotFoundError: ...", moreutils' ts)
        exc = _EXCEPTION.match(stripped[t.end():])
    if exc and _FRAME_MESSAGE.match(exc.group(2) or ""):
        # "IsADirectoryError:   File "x.py", line 16, in f": two processes' lines run into
        # one; the exception's own message is on another line, read there
        return None
    return exc


def _logged_traceback(stripped: str) -> bool:
    """A warning record's traceback header: its frames and exception line are the record's,
    printed by a program that went on."""
    return "Traceback (most recent call last)" in stripped and bool(_LOGGED.match(stripped))


def _starts_workers(frames: list[tuple[str, int, str]]) -> bool:
    """The exception came out of the multiprocessing calls a DataLoader's iterator makes as
    it is built (its queues, ``w.start()``): the workers never ran, whatever the exception
    says (a Dataset that cannot be pickled for spawn, fork out of memory, out of file
    descriptors)."""
    built = [i for i, f in enumerate(frames)
             if f[0].endswith("torch/utils/data/dataloader.py") and f[2] == "__init__"]
    return bool(built) and any("multiprocessing/" in f[0] for f in frames[built[0]:])


def _process_marks(frames: list[tuple[str, int, str]]) -> dict[str, object]:
    """What process raised, by its frames: ``spawn_bootstrap`` for a child multiprocessing
    started with spawn failing before its target ran (importing ``__main__`` again: a
    rank's helper, a DataLoader worker or a pool, not a rank torch.multiprocessing.spawn
    started, whose frames pass its ``_wrap``); ``tensor_handoff`` for one raised handing a
    tensor to another process (a DataLoader worker's batch through its queue's feeder
    thread: files and sockets in /dev/shm and $TMPDIR); ``in_thread`` for one raised in a
    thread other than the main one."""
    marks: dict[str, object] = {}
    if frames and frames[0][0] == "<string>" and any(f[2] == "spawn_main" for f in frames[:3]) \
            and not any(f[0].endswith("torch/multiprocessing/spawn.py") for f in frames):
        marks["spawn_bootstrap"] = True
    if any(f[0].endswith("torch/multiprocessing/reductions.py") for f in frames):
        marks["tensor_handoff"] = True
    if frames and frames[0][0].endswith("threading.py") \
            and frames[0][2] in ("_bootstrap_inner", "_bootstrap"):
        # raised in a thread: Python prints it ("Exception in thread NAME:") and the
        # process goes on without that thread (rules_thread)
        marks["in_thread"] = True
    return marks


def _side_marks(frames: list[tuple[str, int, str]], headed: bool) -> dict[str, object]:
    """The scanner's marks on a traceback touched by a side tool: ``side_tool`` when the
    traceback is the tool's own, ``in_side_tool`` when any frame is in it."""
    marks: dict[str, object] = {}
    if not frames:
        return marks
    if any(_SIDE_TOOL.search(f[0]) for f in frames):
        marks["in_side_tool"] = True  # read before the frames go: the exception line ends them
    # A traceback that starts inside a side tool was printed by the tool's own handler (an
    # uncaught one starts at the program's entry; only the header says the first frame kept
    # is the outermost), or it is the tool's own program failing: not a rank's death.
    if (headed and _SIDE_TOOL.search(frames[0][0])) or (
            _SIDE_PROGRAM.search(frames[0][0])
            and all(_SIDE_TOOL.search(f[0]) for f in frames[1:])):
        marks["side_tool"] = True
    return marks


def _placed(frames: list[tuple[str, int, str]]) -> dict[str, object]:
    """Where a traceback's exception came from: the user's last frame, the last frame, and
    the loop that printed it and went on (its outermost frame), if one did."""
    out: dict[str, object] = {}
    if frames and any(frames[0][0].endswith(f) and frames[0][2] == fn
                      for f, fn in _PRINTS_AND_GOES_ON):
        out["printed_by"] = frames[0][2]
    user = [f for f in frames if not is_library_frame(f[0])]
    if user:
        file, lineno, fn = user[-1]
        out["where"] = f"{file}:{lineno} in {fn}"
    if frames:
        file, lineno, fn = frames[-1]
        out["raised_at"] = f"{file}:{lineno} in {fn}"
    return out


def _int(value: object) -> int:
    """A field this module or a signature's ``int`` made a number (the type checker is not
    told which)."""
    if not isinstance(value, int):
        raise TypeError(f"expected an int, got {type(value).__name__}")
    return value
