"""Streaming reader for training logs: bytes in, the few lines worth looking at out.

Logs are bytes, not text: ranks die halfway through a write, DataLoader workers print a NUL
after their bus-error message, and a user may hand us a 1 GB log or a binary by mistake. So
the reader never holds more than one chunk plus one capped line, never decodes a whole file,
and only decodes the lines that hold one of the rules' keywords (most lines of a training log are
progress output that no rule cares about, and skipping them at chunk level keeps a 1 GB file
to seconds).
"""

from __future__ import annotations

import bisect
import os
import re
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO, cast

from ddpdoctor.core import redact
from ddpdoctor.diagnose import envelope, hardwrap, jsonlog, tasklabel, utf16
from ddpdoctor.diagnose.deadline import READ_DEADLINE_S, DeadlineReader
from ddpdoctor.diagnose.gunzip import GZIP_MAGIC as _GZIP_MAGIC
from ddpdoctor.diagnose.gunzip import Gunzip

CHUNK_BYTES = 1 << 20
# A longer line is cut here: tracebacks and error lines fit; a 50 MB tqdm line does not.
MAX_LINE_BYTES = 8192
# Sniffed at the start of every input to tell a log from a binary.
SNIFF_BYTES = 8192

_MAGIC = {
    b"\x7fELF": "ELF executable",
    b"PK\x03\x04": "zip archive",
    b"%PDF": "PDF document",
    b"\x89PNG": "PNG image",
    b"\xff\xd8\xff": "JPEG image",
    b"\x80\x02": "pickle",
    b"\x93NUMPY": "numpy array",
}
# Control bytes that never occur in a text log (tab, LF, CR, ESC and form feed do).
_CONTROL = bytes(b for b in range(32) if b not in (9, 10, 12, 13, 27))

# torchrun prefixes: `[rank1]:` (the excepthook of init_process_group, and c10 logs) and
# `[default1]:` (--tee / --local-ranks-filter: role name + local rank).
# torchx: `[trainer3]:`, `[trainer0|0]:` (role + replica).
_RANK_PREFIX = re.compile(r"\[(?:rank|default|trainer)(\d+)(?:\|\d+)?\]:[ ]?")
# Lightning's rank_prefixed_message: "[rank: 1] ..." (its launcher names a child's local rank)
_LIGHTNING_PREFIX = re.compile(r"\[rank: (\d+)\] ")
# Open MPI's --tag-output (mpirun, horovodrun): "[1,3]<stderr>:text", [jobid,rank]<stream>;
# SageMaker's training toolkit re-writes it line by line as "[1,mpirank:3,algo-1]<stderr>:"
# (aws/sagemaker-training-toolkit, src/sagemaker_training/process.py; a real log:
# pacman100/accelerate-aws-sagemaker, README.md at af5caad, lines 75-86)
# horovodrun's own (gloo) launcher writes the rank alone: "[2]<stderr>:text"
# (safe_shell_exec.prefix_connection's "{time}[{index}]<{prefix}>:{line}", the time only
# with --prefix-output-with-timestamp; G2_horovodrun_gloo_rank2_raises_others_linger.log)
_MPI_TAG = re.compile(r"\[(?:\d+,(?:mpirank:)?)?(\d+)(?:,[\w.-]+)?\]<std(?:out|err|diag)>: ?")
# Ray's actor prefixes (Ray Train, Ray-launched Megatron/OpenRLHF workers): `(worker6,
# rank=6, pid=8930, ip=10.42.3.242)`, `(head, rank=0, pid=123)`, `(RayTrainWorker pid=5,
# ip=10.0.0.1)`; a rank only where the prefix says `rank=N`.
_RAY_PREFIX = re.compile(r"\s*\((?:[\w.-]+(?:,? ))?(?:rank=(\d+), )?pid=\d+"
                         r"(?:, ip=[\d.:a-fA-F]+)?\)\s?")
# Per-rank file names: rank1.log, node0-rank-3.txt, worker_rank_2.err, and torchrun's
# --log-dir layout <run_id>/attempt_0/<local_rank>/stderr.log.
_PATH_RANK = [
    re.compile(r"attempt_\d+/(\d+)/(?:stdout|stderr|error)\.(?:log|json)$"),
    re.compile(r"(?:^|[^a-z])rank[_-]?(\d+)(?![0-9])", re.IGNORECASE),
]
# A Markdown or e-mail quote around a pasted log, outermost (">   File ...", "> > x"; the
# CommonMark block quote marker: '>' and one optional space, https://spec.commonmark.org/
# 0.31.2/#block-quotes; b_dataloader_bus_error_yolov3_system_ram.log, ultralytics/yolov3
# #1151, is quoted whole). Megatron's own "> initializing ..." lines lose nothing by it.
# The backtick of an inline code span a log was pasted in goes too ("`RuntimeError: ...",
# L3_fail_ddp_load_missing_keys_unimatch.log, whose error was unread), never a fence's,
# nor one that opens a name the program itself quoted (Lightning's "`Trainer.fit` stopped:
# `max_epochs=30` reached.", whose completion went unread).
_QUOTE = re.compile(r"(?:>[ \t]?)+(?:`(?=[^`])(?![\w.]+`))?|`(?=[^`])(?![\w.]+`)")
# What a log collector or a remote shell puts in front of every line it passes on, carrying
# no rank (one separator taken, so the line's own indentation stays): an RFC 3339 time
# (`kubectl logs --timestamps`, Docker, CloudWatch, Loki and Ray/Beaker exports:
# "2024-05-01T12:00:01.123456789Z text"), and pdsh's host label (DeepSpeed's multi-node
# launcher: "worker-1: text", "10.0.0.2: text"): an address, or a lower-case name with a
# digit in it, never a bare number (srun's task label), a rank's own word ("rank1: ..."),
# a program's file ("train.py: error: ...") or an upper-case error code ("EI0002: ...").
_COLLECTOR_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
                             r"(?: (?:stdout|stderr)(?: [FP])?)?[ \t]")
# a time a log viewer or collector put in front of a line: a date (ISO, or moreutils' `ts`
# "Dec 06 ") or none, then the clock
_TIME = (r"\s*\[?(?:\d{4}[-/]\d\d[-/]\d\d[ T]|[A-Z][a-z]{2} [ \d]\d )?"
         r"\d\d:\d\d(?::\d\d)?(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?")
# the time and the one blank after it (what follows is the line's own indentation)
TIME_HEAD = re.compile(_TIME + r"[ \t]")
_TIME_ALONE = re.compile(_TIME + r"\s*")
_HOST_LABEL = re.compile(
    r"(?!(?:rank|local_rank|default|trainer|step|epoch|iter|gpu|cuda|device|task|proc)\d+:)"
    r"(?=[a-z0-9.-]*\d)(?:\d{1,3}(?:\.\d{1,3}){3}|[a-z][a-z0-9]*(?:-[a-z0-9]+)+|[a-z]+\d+)"
    r"(?!\.(?:py|sh|cc?|cpp|cu|h|log|txt|json|ya?ml)\b)(?:\.[a-z][a-z0-9-]*)*: (?=.)")


@dataclass
class RawLine:
    """One picked line: its 1-based line number in the file and its decoded text."""

    lineno: int
    text: str  # as read: what a finding quotes (a pdsh host label is information there)
    truncated: bool = False
    # where the job's own text starts: after the envelope a collector put in front of every
    # line of this input (diagnose/envelope.py), learned from the input; 0 if none
    start: int = 0
    # the start of the line after it, as printed (its envelope off): a line a paste or a
    # terminal wrapped ends there
    cont: str = ""

    @property
    def printed(self) -> str:
        """The line as the process printed it: its collector's or remote shell's envelope
        off (`strip_envelope`, and the envelope learned from the input). Rules read this;
        quotes keep `text`."""
        return strip_envelope(self.text[self.start:])


@dataclass
class ReadStats:
    """What reading one input found out about it (shown as its check line)."""

    name: str
    bytes_read: int = 0
    lines: int = 0
    picked: int = 0
    truncated_lines: int = 0
    nul_bytes: bool = False
    binary: str = ""  # non-empty: why the input was judged a binary and skipped
    compressed: bool = False
    incomplete: bool = False  # part of the input could not be read (see notes)
    leading_nul: int = 0  # NUL bytes skipped at the start
    # srun's tasks (its "0: " label, its "task 0" errors) are a launcher's per node, not
    # ranks (diagnose/tasklabel.py)
    tasks_are_nodes: bool = False
    notes: list[str] = field(default_factory=list)


def rank_from_path(path: str) -> int | None:
    """The rank a per-rank log file's path names, or None."""
    norm = str(path).replace("\\", "/")
    for pattern in _PATH_RANK:
        m = pattern.search(norm if pattern is _PATH_RANK[0] else norm.rsplit("/", 1)[-1])
        if m:
            return int(m.group(1))
    return None


def strip_envelope(text: str) -> str:
    """The line as the process printed it: a quote's markers, a collector's time or a
    remote shell's host label in front of it taken off (any of them, in that order); else
    the line."""
    q = _QUOTE.match(text)
    if q is not None:
        text = text[q.end():]
    m = _COLLECTOR_TIME.match(text)
    if m is not None:
        text = text[m.end():]
    h = _HOST_LABEL.match(text)
    if h is not None:
        text = text[h.end():]
    if m is not None or h is not None:
        # a pasted line's inline-code backtick behind the collector's time or host label
        q = _QUOTE.match(text)
        if q is not None:
            text = text[q.end():]
    t = TIME_HEAD.match(text)
    if t is not None and t.end() and envelope.printed_by_itself(text[t.end():]):
        # any other time, before what a process prints with no logger in front (NCCL's,
        # glog's header, a traceback's line): a collector's (moreutils' ts, a viewer's)
        text = text[t.end():]
    return text


def split_rank_prefix(text: str) -> tuple[int | None, str]:
    """``"[rank1]: ValueError: x"`` -> ``(1, "ValueError: x")``; no prefix -> ``(None, text)``.
    Ray's actor prefix is taken off too (its rank, where it names one), Lightning's
    (``"[rank: 1] ..."``), srun's ``--label`` prefix (``"1: ValueError: x"``, the task) and
    Open MPI's ``--tag-output`` (``"[1,1]<stderr>:ValueError: x"``).

    The prefix may follow a pid or timestamp that some launchers and log collectors add, so
    it is looked for near the start of the line, not only at column 0.
    """
    m = _RANK_PREFIX.search(text, 0, 64)
    if m is None:
        label = (_LIGHTNING_PREFIX.match(text) or tasklabel.LABEL.match(text)
                 or _MPI_TAG.match(text))
        if label is not None:
            return int(label.group(1)), text[label.end():]
        ray = _RAY_PREFIX.match(text)
        if ray is not None:  # the line after Ray's prefix is what the rank printed
            return (int(ray.group(1)) if ray.group(1) else None), text[ray.end():]
        return None, text
    head = text[: m.start()]
    # what may stand before it: a pid, a launcher's label, or a time a log viewer or
    # collector printed ("2025-02-18 12:54 [rank13]:[E218 ...", NVIDIA/nccl#1610)
    if head.strip() and not re.fullmatch(r"\s*(?:\[\d+\]|\d+|[\w.:-]+\s*[:|])\s*", head) \
            and not _TIME_ALONE.fullmatch(head):
        return None, text
    return int(m.group(1)), text[m.end():]


def sniff_binary(head: bytes) -> str:
    """Why ``head`` (the first bytes of an input) is not a text log, or ``""``."""
    for magic, what in _MAGIC.items():
        if head.startswith(magic):
            return what
    if not head:
        return ""
    # One stray NUL (a worker's bus-error message ends with one) does not make a binary;
    # a high share of control bytes does.
    controls = sum(head.count(bytes([b])) for b in _CONTROL)
    if controls / len(head) > 0.10:
        return f"binary data ({controls * 100 // len(head)}% control bytes)"
    return ""


def open_input(path: str, deadline_s: float = READ_DEADLINE_S) -> tuple[BinaryIO, str]:
    """Open a log path (``-`` is stdin) as bytes; raises OSError with the reason.

    Only regular files are read: a FIFO with no writer would block forever and a device
    never ends, so both are refused before the first read (the open itself is
    non-blocking). Symlinks are followed: a log is read, never written. A regular file
    can still block on read (``/proc/kmsg``, a ``/sys`` attribute, a hung mount), so every
    read has a deadline (deadline.py); a file that stats as empty yet gives data (a kernel
    pseudo-file) is read for at most ``deadline_s`` in all.
    """
    if path == "-":
        return _stdin(deadline_s), "<stdin>"
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(21, "is a directory", path)
        if not stat.S_ISREG(st.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a regular file"
            raise OSError(22, f"{kind}: pipe it to stdin ('-') instead", path)
    except BaseException:
        os.close(fd)
        raise
    # Stays non-blocking: a pseudo-file that honours O_NONBLOCK then waits in poll, not in
    # read. The reader owns (and closes) the fd.
    total = deadline_s if st.st_size == 0 else None
    return DeadlineReader(fd, deadline_s, total), path  # type: ignore[return-value]


def _stdin(deadline_s: float) -> BinaryIO:
    """stdin: a pipe as is, a file (``< /proc/kmsg``) with the deadline.

    A pipe gets no deadline: its writer is the user's job (``torchrun ... | ddpdoctor
    diagnose``), which may print nothing for minutes and is no hang; the pipe ends when the
    job does (or at Ctrl-C). A redirected file is a file like any other.
    """
    import sys

    try:
        st = os.fstat(sys.stdin.fileno())
    except (OSError, ValueError):
        return sys.stdin.buffer
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode)):
        return sys.stdin.buffer
    fd = os.dup(sys.stdin.fileno())
    os.set_blocking(fd, False)
    # A device (`< /dev/zero`, `< /dev/urandom`) never ends: like a pseudo-file that stats
    # empty, it is read for the deadline at most. `< /dev/null` (a closed stdin) ends at once.
    total = deadline_s if st.st_size == 0 or stat.S_ISCHR(st.st_mode) else None
    return DeadlineReader(fd, deadline_s, total)  # type: ignore[return-value]


def iter_picked(stream: BinaryIO, keywords: tuple[bytes, ...], stats: ReadStats,
                max_line: int = MAX_LINE_BYTES, chunk_bytes: int = CHUNK_BYTES,
                ) -> Iterator[RawLine]:
    """Yield the lines of ``stream`` that contain one of ``keywords``, with line numbers.

    Line numbers count ``\\n`` (what an editor shows). A ``\\r`` also ends a line for
    matching, because progress bars rewrite one line with ``\\r`` for hours and the error
    that kills the job is often glued to the end of it. Memory stays bounded by
    ``chunk_bytes`` + ``max_line`` whatever the input. A gzip input is decompressed as a
    stream: a truncated or corrupt archive yields what could be read and a note.
    """
    # Every read goes through _read_some: a failed or timed-out read (deadline.py) is a
    # note on this input, never an exception that would drop the other inputs.
    head = _read_some(stream, SNIFF_BYTES, stats)
    if head.startswith(_GZIP_MAGIC):
        stats.compressed = True
        stream = Gunzip(head, stream, stats)  # type: ignore[assignment]
        head = _read_some(stream, SNIFF_BYTES, stats)
    codec, bom = utf16.sniff(head)
    if codec:  # before the NUL checks: half of UTF-16's bytes are NUL
        stats.notes.append(f"read as {codec.upper()} (Windows PowerShell's `>` writes it)")
        stream = utf16.Utf16(head[bom:], stream, codec)  # type: ignore[assignment]
        head = _read_some(stream, SNIFF_BYTES, stats)
    if jsonlog.sniff(head):
        stats.notes.append("read as Docker's json-file log (each record's text)")
        stream = jsonlog.DockerJson(head, stream)  # type: ignore[assignment]
        head = _read_some(stream, SNIFF_BYTES, stats)
    head, skipped = _skip_leading_nul(head, stream, stats)
    stats.leading_nul = skipped
    if skipped and head:
        stats.notes.append(f"{skipped} leading NUL bytes skipped (a log truncated in place, "
                           "e.g. logrotate copytruncate)")
    why = sniff_binary(head)
    if why:
        stats.binary = why
        stats.bytes_read = len(head)
        return
    head, stream, joined = _unwrapped(head, stream, stats)
    learned = _envelope(head, stats)
    lines = _picked(stream, head, keywords, stats, max_line, chunk_bytes, joined, learned)
    if joined is None:
        yield from lines
        return
    for line in lines:  # a quote's file:line is the input's
        line.lineno = joined.input_line(line.lineno)
        yield line
    stats.lines = joined.pieces
    stats.bytes_read += joined.taken - joined.given  # the input's size, not the joined


def _unwrapped(head: bytes, stream: BinaryIO, stats: ReadStats,
               ) -> tuple[bytes, BinaryIO, hardwrap.HardWrapped | None]:
    """A log hard-wrapped at a terminal's width, told by its first 256 KiB, read with each
    wrapped line joined again (diagnose/hardwrap.py); else the input as it is."""
    wide = head + _read_some(stream, hardwrap.SNIFF_BYTES - len(head), stats)
    width = hardwrap.sniff(wide)
    if not width:
        return wide, stream, None
    stats.notes.append(f"read as hard-wrapped at {width} columns (a terminal's copy): each "
                       "line that fills the width joined to the one it goes on in")
    joined = hardwrap.HardWrapped(wide, stream, width)
    as_stream = cast(BinaryIO, joined)  # the reader takes any read(n)
    return _read_some(as_stream, SNIFF_BYTES, stats), as_stream, joined


def _known(text: str) -> tuple[int | None, str]:
    """The rank a line's prefix names, and what is left of it once every envelope and rank
    prefix the reader knows is off."""
    return split_rank_prefix(strip_envelope(text))


def _envelope(head: bytes, stats: ReadStats) -> envelope.Envelope | None:
    """The envelope a log collector put in front of every line, told by the input's first
    lines (diagnose/envelope.py); None where there is none the reader does not know."""
    lines = head.splitlines()[:envelope.SAMPLE_LINES]  # a cut last line starts as any
    texts = [_text(ln) for ln in lines]
    learned = envelope.sniff(texts, _known)
    if learned is not None:
        stats.notes.append(f"every line starts with {learned.example.strip()!r} (a log "
                           "collector's envelope): taken off before each line is read")
        return learned
    learned = tasklabel.sniff(texts)
    if learned is not None:
        stats.tasks_are_nodes = True
        stats.notes.append("srun's task label ('0: ') names a launcher's task on a node, "
                           "not a rank: taken off, each line keeps the rank it names itself")
    return learned


def _picked(stream: BinaryIO, head: bytes, keywords: tuple[bytes, ...], stats: ReadStats,
            max_line: int, chunk_bytes: int, joined: hardwrap.HardWrapped | None,
            learned: envelope.Envelope | None = None) -> Iterator[RawLine]:
    prefilter = Prefilter(keywords, learned)
    lineno = 1
    carry = b""
    ends_with_newline = True
    skipping = False  # inside the tail of an over-long line we already cut
    data = head
    while True:
        if not data:
            data = _read_some(stream, chunk_bytes, stats)
        if not data:
            break
        stats.bytes_read += len(data)
        ends_with_newline = data.endswith(b"\n")
        if not stats.nul_bytes and b"\x00" in data:
            stats.nul_bytes = True
        buf = carry + data
        data = b""
        cut = max(buf.rfind(b"\n"), buf.rfind(b"\r")) + 1
        complete, carry = buf[:cut], buf[cut:]
        if skipping and complete:
            # The over-long line ends in this chunk: drop what is left of it.
            first_eol = _first_eol(complete, 0)
            lineno += complete.count(b"\n", 0, first_eol + 1)
            complete = complete[first_eol + 1:]
            skipping = False
        yield from prefilter.pick(complete, lineno, stats, max_line)
        lineno += complete.count(b"\n")
        if joined is not None:
            joined.input_line(lineno)  # what is behind the reader is forgotten
        if len(carry) > max_line:
            # No end of line for a long stretch: look at what we have, then skip the rest.
            if not skipping:
                yield from prefilter.pick(carry, lineno, stats, max_line, final=True)
                stats.truncated_lines += 1
            skipping = True
            carry = b""
    if carry and not skipping:
        yield from prefilter.pick(carry, lineno, stats, max_line, final=True)
    stats.lines = lineno - 1 + (not ends_with_newline)


def _skip_leading_nul(head: bytes, stream: BinaryIO, stats: ReadStats) -> tuple[bytes, int]:
    """Drop the NUL bytes a log starts with (the hole copytruncate leaves); count them."""
    skipped = 0
    while head and _all_nul(head):
        skipped += len(head)
        # Chunks, not sniffs: a 20 GB hole was 2.5 million reads (minutes).
        head = _read_some(stream, CHUNK_BYTES, stats)
    stripped = head.lstrip(b"\x00")
    skipped += len(head) - len(stripped)
    stats.bytes_read += skipped
    if stripped and len(stripped) < SNIFF_BYTES // 2:
        stripped += _read_some(stream, SNIFF_BYTES, stats)
    return stripped, skipped


_ZEROS = bytes(CHUNK_BYTES)


def _all_nul(buf: bytes) -> bool:
    """Only NUL bytes? A memcmp against zeros: ``strip`` took 3 ms per MiB of a hole."""
    if len(buf) <= len(_ZEROS):
        return buf == _ZEROS[:len(buf)]
    return buf.count(0) == len(buf)


def _read_some(stream: BinaryIO, n: int, stats: ReadStats) -> bytes:
    """Read up to ``n`` bytes; an error ends the input with a note (what was read stays)."""
    try:
        return stream.read(n)
    except (OSError, EOFError, zlib.error) as e:
        note = f"stopped reading: {e}"
        if note not in stats.notes:  # a stream that failed keeps failing: one note
            stats.notes.append(note)
        stats.incomplete = True
        return b""


def _first_eol(buf: bytes, start: int) -> int:
    ends = [i for i in (buf.find(b"\n", start), buf.find(b"\r", start)) if i >= 0]
    return min(ends) if ends else len(buf)


# Digits become 0 and \r becomes \n, length unchanged: the lines of a training log then
# repeat (progress bars, loss lines), so a chunk is checked as its set of distinct lines.
_FOLD = bytes.maketrans(b"123456789\r", b"000000000\n")


class Prefilter:
    """Finds the lines of a buffer that hold a keyword, at C speed on ordinary logs.

    A 1 MiB chunk of a training log is ~13,000 lines but a few dozen distinct ones once
    digits are folded; the keywords are looked for in those only, and only when one is
    there are the chunk's lines walked to find where. Folding keeps byte positions, so a
    hit maps back to the original line.
    """

    def __init__(self, keywords: tuple[bytes, ...],
                 learned: envelope.Envelope | None = None) -> None:
        self.keywords = keywords
        self.learned = learned
        self.folded = tuple({k.translate(_FOLD) for k in keywords})

    def pick(self, buf: bytes, base_lineno: int, stats: ReadStats, max_line: int,
             final: bool = False) -> Iterator[RawLine]:
        if not buf:
            return
        folded = buf.translate(_FOLD)
        lines = [folded] if final else folded.split(b"\n")
        distinct = list(set(lines))
        joined = b"\n".join(distinct)
        if not any(k in joined for k in self.folded):
            return
        hits = self._holding(distinct, joined)
        lineno = base_lineno
        counted_to = 0
        pos = 0
        for i, ln in enumerate(lines):
            if ln in hits:
                lineno += buf.count(b"\n", counted_to, pos)
                counted_to = pos
                line = self._line(buf[pos:pos + len(ln)], lineno, stats, max_line, final)
                nxt, after = i + 1, pos + len(ln) + 1
                if nxt + 1 < len(lines) and not lines[nxt] and buf[after - 1:after] == b"\r":
                    nxt, after = nxt + 1, after + 1  # CRLF: the next line is past the \n
                if nxt < len(lines):
                    cont = _text(buf[after:after + min(len(lines[nxt]), _CONT_BYTES)])
                    if self.learned is not None:
                        cont = cont[self.learned.cut(cont):]
                    line.cont = strip_envelope(cont)
                yield line
            pos += len(ln) + 1

    def _holding(self, distinct: list[bytes], joined: bytes) -> set[bytes]:
        """The lines of ``distinct`` (``joined`` is them joined by newlines) that hold a
        keyword: each keyword is found in the joined text at C speed and mapped to its line,
        rather than every line testing every keyword. No keyword holds a newline."""
        starts, at = [], 0
        for ln in distinct:
            starts.append(at)
            at += len(ln) + 1
        hits: set[bytes] = set()
        for k in self.folded:
            i = joined.find(k)
            while i >= 0:
                line = bisect.bisect_right(starts, i) - 1
                hits.add(distinct[line])
                i = joined.find(k, starts[line + 1]) if line + 1 < len(starts) else -1
        return hits

    def _line(self, raw: bytes, lineno: int, stats: ReadStats, max_line: int,
              final: bool) -> RawLine:
        truncated = len(raw) > max_line
        if truncated:
            # Keep the part around the keyword: that is what the rules need.
            hit = min((i for i in (raw.find(k) for k in self.keywords) if i >= 0), default=0)
            lo = max(0, hit - max_line // 4)
            raw = raw[lo:lo + max_line]
            stats.truncated_lines += not final
        stats.picked += 1
        text = _text(raw)
        return RawLine(lineno, text, truncated,
                       self.learned.cut(text) if self.learned is not None else 0)


_CONT_BYTES = 400


# A terminal's colour and cursor codes (CSI: ESC [ ... final byte), as torchtitan's,
# DeepSpeed's and loguru's coloured output and a captured terminal carry them: a rule reads
# the words, and a wording anchored at the line's start must not meet ESC[0m first.
_ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]")


def _text(raw: bytes) -> str:
    if b"\x1b" in raw:
        raw = _ANSI.sub(b"", raw)
    # A secret known by its shape (a JWT, an AWS key id) is masked as it is read: the
    # rules cut titles and quotes to a width, and a cut secret no longer has its shape
    # when the report is scrubbed ("AKIASEKRET7EXA ..." reached the title).
    return redact.shapes(raw.replace(b"\x00", b"").decode("utf-8", errors="replace"))
