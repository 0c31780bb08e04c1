"""A log collector's envelope, learned from the log itself: what it put in front of every
line the job printed.

journald (``Nov 29 00:56:54 node-1 python3[4242]: ``), docker compose and SageMaker's local
mode (``algo-1-6pcq6 |  ``), ``kubectl logs --prefix`` (``[pod/job-worker-0/pytorch] ``):
each passes a job's output on with its own mark before every line. The reader knows some by
name (reader.strip_envelope: an RFC 3339 time, pdsh's host label, a quote); any other hid
the rank prefix, the traceback and every wording read from a line's start. Measured on the
development set (tools.probe, styles journald, compose, kubeprefix, 165 logs drawn): 28
logs read right read differently each, healthy runs called failed and failed jobs called
healthy among them; with the envelope learned, 11 or 12 of all 777 (excerpts too short to
prove a shape).

Told by the input's own shape, never guessed per line, and only where it cannot be a
logger's format:
- the same prefix, letters, digits and runs of blanks folded, ending at a separator and
  one blank (": ", "| ", "] "), starts nine in ten of the input's first non-blank lines
  (at least three);
- it holds no prefix the reader knows, and takes no rank the reader would have read;
- it carries a number, a bracket or a bar (words alone are a program's own message);
- on two lines at least it stands in front of something only a printer outside the
  process is in front of (`_WRAPPED`: a traceback's own lines, an empty one, another
  logger's header, a launcher's rank prefix). A logging format prefixes a record's first line
  only, so a logger's time and level are never taken for an envelope.
The longest prefix that passes all four is the envelope.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

# how many of the input's first lines the shape is read from; the evidence that it wraps
# the job's lines is looked for in up to SAMPLE_LINES
_SHAPE_LINES = 400
SAMPLE_LINES = 2000
_MIN_LINES = 3
# of the sample's non-blank lines, the share that must start with the prefix
_SHARE = 0.9
_MAX_LEN = 120
# where an envelope may end: a separator and one blank (": ", "| ", "] ", ") ", "> "); the
# line's own indentation after it is the job's
_BOUNDARY = re.compile(r"[:|\]>)][ \t]"
                       # or a clock and a blank, no separator: moreutils' `ts` ("Dec 06
                       # 17:37:24 text"), a log viewer's time column ("2025-02-18 12:54 ")
                       r"|(?<=\d:\d\d)[ \t]|(?<=\d:\d\d[.,]\d{3})[ \t]"
                       r"|(?<=\d:\d\d[.,]\d{6})[ \t]")
# What only a line's printer outside the process is in front of, never a logger's format: a
# traceback's own lines (a logger prefixes a record's first line only), another logger's
# record (glog's, c10d's and NCCL's headers, Python logging's default; not a bare time,
# which a logging format may put after its own prefix), or nothing at all. A launcher's prefix
# (torchrun's, srun's, mpirun's, Ray's) is told by the reader (`_bare`).
_WRAPPED = re.compile(
    r"\s*File \"[^\"]+\", line \d+|Traceback \(most recent call last\):"
    r"|[IWEF]\d{4} \d\d:\d\d:\d\d|\[[IWE]\d*(?: [\d:.]+)* ?[\w.]+\.(?:cpp|h|py):\d+\]"
    r"|[\w.-]+:\d+:\d+ \[\d+\] |(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:"
    # torchrun's failure summary, the body of ChildFailedError's message: Python prints it,
    # no logger ("  exitcode  : -9 (pid: 79468)", "[0]:")
    r"|  (?:time|host|rank|exitcode|error_file|traceback) +: |\[\d+\]:$"
    r"|Root Cause \(first observed failure\):|Failures:$|  <NO_OTHER_FAILURES>"
    # py-spy's dump, another process's output: a thread's header, a frame
    r"|Thread (?:0x[0-9A-Fa-f]+|\d+) \((?:idle|active)[^)]*\)|\s+[\w<>.]+ \([^()]+\.py:\d+\)$")
# an envelope carries a number, a bracket or a bar (a time, a pid, a pod, a service): a
# prefix of words alone is a program's own message ("srun: error: ", "kernel: NVRM: ")
_MARKED = re.compile(r"[\d\[\]|()]")
# lines of the job's own shape behind it, one is not enough (a logger's empty record)
_MIN_WRAPPED = 2
_TOKEN = re.compile(r"[A-Za-z0-9]+|[ \t]+|.")
# the reader's own reading of a line: the rank its prefix names, if any, and the rest with
# every envelope and rank prefix it knows taken off
Known = Callable[[str], tuple[int | None, str]]


def printed_by_itself(text: str) -> bool:
    """``text`` starts as only a line's own printer starts it (a traceback's lines, glog's,
    c10d's or NCCL's header): whatever stands in front of it on a line is an outside
    printer's, a collector's time on a line too short to learn it from."""
    return _WRAPPED.match(text) is not None


class Envelope:
    """One learned envelope: ``cut(line)`` is where the job's own text starts."""

    def __init__(self, example: str, pattern: str | None = None) -> None:
        self.example = example
        self._pattern = re.compile(pattern if pattern is not None else _shape(example))

    def cut(self, line: str) -> int:
        m = self._pattern.match(line)
        return m.end() if m is not None else 0


def _shape(example: str) -> str:
    """The regex of ``example``'s shape: a run of letters and digits or of blanks stands for
    any; the blank it ends with is one blank (what follows is the job's indentation)."""
    out = []
    tokens = _TOKEN.findall(example)
    for i, tok in enumerate(tokens):
        if tok[0] in " \t" and i == len(tokens) - 1:
            out.append(re.escape(tok[0]))
        elif tok[0].isalnum():  # a pod's or a host's hash: letters and digits either way
            out.append("[A-Za-z0-9]+")
        elif tok[0] in " \t":
            out.append("[ \t]+")
        else:
            out.append(re.escape(tok))
    return "".join(out)


_ALNUM = re.compile(r"[A-Za-z0-9]+")
_BLANKS = re.compile(r"[ \t]+")


def _key(example: str) -> str:
    """What ``_shape`` folds, as a key (C-speed, where ``_shape`` builds a regex): runs of
    letters and digits one mark, runs of blanks one blank, the blank it ends with kept.
    Counted for every boundary of every sampled line; the regex is built for the winner."""
    body = example.rstrip(" \t")
    tail = example[len(body):len(body) + 1]
    return _BLANKS.sub(" ", _ALNUM.sub("\x00", body)) + tail


def _bare(text: str, known: Known) -> str:
    """``text`` with every prefix the reader knows off, however many it carries
    (torchrun's "[rank0]:[rank0]: ..." when a rank's own output is tee'd again)."""
    for _ in range(4):
        rest = known(text)[1]
        if rest == text:
            break
        text = rest
    return text


def _ends(line: str) -> list[int]:
    return [m.end() for m in _BOUNDARY.finditer(line, 0, _MAX_LEN)]


def _own(line: str, cut: int, known: Known) -> bool:
    """The envelope holds no prefix the reader knows (a rank prefix after it stays the
    job's), and a rank the reader finds in the whole line it still finds after it."""
    if any(known(line[i:])[1] != line[i:] for i in _ends(line) if i < cut):
        return False
    return known(line)[0] is None or known(line[cut:])[0] is not None


def sniff(lines: list[str], known: Known) -> Envelope | None:
    """The envelope every line of ``lines`` (an input's first lines) carries, or None.

    ``known`` is the reader's own reading of a line (the rank its prefix names, and the
    rest once a collector's time, a host label or a rank prefix is off): a prefix it takes
    off is not learned again.
    """
    solid = [ln for ln in lines[:_SHAPE_LINES] if ln.strip()]
    if len(solid) < _MIN_LINES:
        return None
    shapes: Counter[str] = Counter()
    example: dict[str, str] = {}
    for line in solid:
        for end in _ends(line)[:8]:
            shape = _key(line[:end])
            shapes[shape] += 1
            example.setdefault(shape, line[:end])
    need = _SHARE * len(solid)
    for shape in sorted((s for s, n in shapes.items() if n >= need),
                        key=lambda s: -len(example[s])):
        if not _MARKED.search(example[shape]):
            continue  # words alone ("srun: error: "): a program's message, not a mark
        envelope = Envelope(example[shape])
        fits = _fits(envelope, solid, need, known)
        if fits is None:
            return None  # the reader takes it off already (Ray's prefix, a known head)
        if fits and _wraps(envelope, lines, known):
            return envelope
    return None


def _fits(envelope: Envelope, solid: list[str], need: float, known: Known) -> bool | None:
    """On enough lines, of the reader's unknown and taking no rank; None where the reader
    reads every such line as it would without it."""
    cuts = [envelope.cut(ln) for ln in solid]
    if sum(1 for c in cuts if c) < need:
        return False
    seen = [(ln, c) for ln, c in zip(solid, cuts) if c][:50]
    if not all(_own(ln, c, known) for ln, c in seen):
        return False
    if all(_bare(ln, known) == _bare(ln[c:], known) for ln, c in seen):
        return None
    return True


def _wraps(envelope: Envelope, lines: list[str], known: Known) -> bool:
    """In front of what only an outside printer's envelope is (_WRAPPED, a launcher's
    rank prefix, nothing) on two lines at least: a collector's, not a logger's format. A
    host label or a time after it proves nothing (Slurm's "srun: error: nid1: task 0: ...")."""
    seen = 0
    for line in lines[:SAMPLE_LINES]:
        c = envelope.cut(line)
        if c:
            rest = line[c:]
            if not rest.strip() or known(rest)[0] is not None or \
                    _WRAPPED.match(_bare(rest, known)):
                seen += 1
                if seen >= _MIN_WRAPPED:
                    return True
    return False
