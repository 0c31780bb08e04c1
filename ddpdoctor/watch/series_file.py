"""The per-rank step series file: what the HTML report draws for an ordinary job.

The training thread only adds a step's times to running sums (``Monitor.boundary``); the
heartbeat thread turns the sums into one record per interval it wakes for (~1 s): the
per-step means over the steps since the last record. No file write happens on the
training thread.

Bounded: a file holds at most ``cap`` records. When the next record would pass the cap,
the file is rewritten with each pair of neighbouring records merged into one (halving the
resolution) and from then on a record is written only once it spans twice as many steps
as before. A long run therefore keeps between cap/2 and cap records, evenly spread over
all its steps; memory use is the same bound.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass

from ddpdoctor.core import safefile
from ddpdoctor.core.contract import SERIES_SCHEMA

log = logging.getLogger("ddpdoctor.watch")
DEFAULT_CAP = 2000


@dataclass
class SeriesRecord:
    """Per-step means over the ``steps`` steps ending at ``step``.

    ``data_wait_s`` and ``forward_s``: means over the ``timed_steps`` of them that the watch
    timed (module hooks on: the steps before a check step); None when none was timed.
    """

    step: int
    rank: int
    steps: int
    step_time_s: float
    data_wait_s: float | None = None
    forward_s: float | None = None
    timed_steps: int = 0
    rss_mb: float | None = None
    loss: float | None = None
    # this rank's GPU at the end of the interval (watch/gpu_metrics.py); None: no GPU, or
    # not readable (NVML missing: the allocator's two still come)
    gpu_util_pct: int | None = None
    gpu_memory_used_mb: float | None = None
    cuda_allocated_mb: float | None = None
    cuda_reserved_mb: float | None = None
    gpu_clock_events: list[str] | None = None

    def to_json(self) -> str:
        return json.dumps({"schema": SERIES_SCHEMA, **asdict(self)})


GPU_FIELDS = ("gpu_util_pct", "gpu_memory_used_mb", "cuda_allocated_mb", "cuda_reserved_mb",
              "gpu_clock_events")


def merge(a: SeriesRecord, b: SeriesRecord) -> SeriesRecord:
    """One record for two neighbours (``a`` before ``b``): step-weighted means."""
    n = a.steps + b.steps

    def timed_mean(x: float | None, y: float | None) -> float | None:
        if x is None or y is None:
            return y if x is None else x
        t = a.timed_steps + b.timed_steps
        return (x * a.timed_steps + y * b.timed_steps) / t if t else None

    return SeriesRecord(
        step=b.step, rank=b.rank, steps=n,
        step_time_s=(a.step_time_s * a.steps + b.step_time_s * b.steps) / max(n, 1),
        data_wait_s=timed_mean(a.data_wait_s, b.data_wait_s),
        forward_s=timed_mean(a.forward_s, b.forward_s),
        timed_steps=a.timed_steps + b.timed_steps,
        rss_mb=b.rss_mb if b.rss_mb is not None else a.rss_mb,
        loss=b.loss if b.loss is not None else a.loss,
        **{f: getattr(b, f) if getattr(b, f) is not None else getattr(a, f)
           for f in GPU_FIELDS})


def halve(records: list[SeriesRecord]) -> list[SeriesRecord]:
    """Neighbouring pairs merged; an odd last record stays as it is."""
    out = [merge(a, b) for a, b in zip(records[0::2], records[1::2])]
    if len(records) % 2:
        out.append(records[-1])
    return out


class SeriesWriter:
    """Appends interval records to one rank's file, within ``cap`` records."""

    def __init__(self, path: str, cap: int = DEFAULT_CAP) -> None:
        if cap < 2:
            raise ValueError("cap must be >= 2")
        self.path, self.cap = path, cap
        self.stride = 1  # steps a record spans at least; doubles at each halving
        self.records: list[SeriesRecord] = []
        self._open: SeriesRecord | None = None  # an interval shorter than the stride
        self.failed = False

    def add(self, rec: SeriesRecord) -> None:
        """One interval from the sampler; written once the pending span reaches stride."""
        if self.failed or rec.steps <= 0:
            return
        rec = merge(self._open, rec) if self._open is not None else rec
        if rec.steps < self.stride:
            self._open = rec
            return
        self._open = None
        try:
            if len(self.records) >= self.cap:
                self.records = halve(self.records)
                self.stride *= 2
                safefile.write_atomic(self.path, "".join(r.to_json() + "\n"
                                                         for r in self.records), 0o644)
            self.records.append(rec)
            with safefile.open_append(self.path) as f:
                f.write(rec.to_json() + "\n")
        except OSError as e:  # a full disk or a planted link: stop writing, keep training
            self.failed = True
            log.debug("ddpdoctor: cannot write the step series %s: %s", self.path, e)

    def flush(self) -> None:
        """Write an interval still shorter than the stride (at the end of the run)."""
        if self._open is not None:
            pending, self._open, stride = self._open, None, self.stride
            self.stride = 1
            self.add(pending)
            self.stride = stride


# (step, sum of step_s, sum of data_s over timed steps, sum of forward_s, timed steps)
Sums = tuple[int, float, float, float, int]


def interval(prev: Sums, now: Sums, rank: int, rss_bytes: int | None) -> SeriesRecord | None:
    """The record for the steps between two snapshots of the sums; None if no step ran."""
    step, step_s, data_s, fwd_s, timed = now
    n = step - prev[0]
    if n <= 0:
        return None
    t = timed - prev[4]
    mean = (step_s - prev[1]) / n
    if not math.isfinite(mean):
        return None
    return SeriesRecord(
        step=step, rank=rank, steps=n, step_time_s=mean,
        data_wait_s=(data_s - prev[2]) / t if t else None,
        forward_s=(fwd_s - prev[3]) / t if t else None, timed_steps=t,
        rss_mb=round(rss_bytes / 2**20, 1) if rss_bytes else None)

