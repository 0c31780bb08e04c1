"""What a user command and ``ddpdoctor scale`` agree on: the throughput line and the env vars.

A user command (``ddpdoctor scale -- CMD``) prints, from rank 0, one line per step (or per
logging interval)::

    ddpdoctor-throughput: 1834.2 samples/s
    ddpdoctor-throughput: 58694 tokens/s step=7 rank=0 step_s=0.1392 data_s=0.0021 compute_s=0.041

The number is the whole job's throughput (all ranks together). The unit is ``samples/s``
or ``tokens/s``. Optional ``key=value`` fields after it: ``step`` (int), ``rank`` (int),
and this rank's times in seconds for that step: ``step_s`` (the whole step),
``data_s`` (waiting for the batch), ``compute_s`` (forward; forward+backward before any
communication if you can time it so). Every rank may print its own line with ``rank=R``:
with ``data_s``/``compute_s`` from every rank, scale can tell a straggler or a data-bound
rank from communication; the throughput of rank 0's lines (or of lines with no ``rank``)
is the one used. Anything before the marker (torchrun's ``[rank0]:`` prefix, a logger's
time stamp) is ignored, and so is a line run together with another rank's
(each marker starts a line).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ddpdoctor.core.contract import SCALE_MODE, SCALE_NPROC, SCALE_RANK_BATCH

MARKER = "ddpdoctor-throughput:"
UNITS = ("samples/s", "tokens/s")
TIME_KEYS = ("step_s", "data_s", "compute_s")
INT_KEYS = ("step", "rank")

# Set for every run of a user command (and of the trainer): the world size of this run,
# weak|strong, and the per-rank batch when --batch-size / --global-batch was given.
NPROC_ENV = SCALE_NPROC
MODE_ENV = SCALE_MODE
RANK_BATCH_ENV = SCALE_RANK_BATCH

_LINE = re.compile(re.escape(MARKER) + r"\s*(\S+)\s+(\S+)(.*)$")


@dataclass(frozen=True)
class ThroughputLine:
    value: float
    unit: str
    step: int | None = None
    rank: int | None = None
    times: dict[str, float] = field(default_factory=dict)


def format_line(value: float, unit: str = "samples/s", **fields: float | int) -> str:
    """The line to print (for Python user scripts: ``print(format_line(n / dt))``)."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {', '.join(UNITS)}")
    extra = "".join(f" {k}={v:.6g}" if isinstance(v, float) else f" {k}={v}"
                    for k, v in fields.items())
    return f"{MARKER} {value:.6g} {unit}{extra}"


def _number(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) and v >= 0 else None


def parse_line(text: str) -> ThroughputLine | None:
    """A ThroughputLine, or None when the line has no well-formed marker."""
    m = _LINE.search(text.rstrip("\r\n"))
    if not m:
        return None
    value, unit = _number(m.group(1)), m.group(2)
    if value is None or value <= 0 or unit not in UNITS:
        return None
    ints: dict[str, int] = {}
    times: dict[str, float] = {}
    for item in m.group(3).split():
        key, _, raw = item.partition("=")
        if key in INT_KEYS and raw.isdigit():
            ints[key] = int(raw)
        elif key in TIME_KEYS and (v := _number(raw)) is not None:
            times[key] = v
    return ThroughputLine(value, unit, ints.get("step"), ints.get("rank"), times)


def parse_lines(text: str) -> list[ThroughputLine]:
    """Every well-formed line of an output. Two ranks writing to one pipe at once can run
    their lines together (``...compute_s=0.002ddpdoctor-throughput: 418 samples/s ...``,
    seen in a real run): each marker starts a line of its own."""
    out = []
    for line in text.splitlines():
        for part in line.split(MARKER)[1:]:
            parsed = parse_line(MARKER + part)
            if parsed is not None:
                out.append(parsed)
    return out
