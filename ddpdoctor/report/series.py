"""The time series a page draws, read from files other parts of ddpdoctor already write.

Nothing here computes a verdict: it only loads what the trainer's ``--json-log``, the
watch's events, the heartbeats and the Flight Recorder dumps hold, as typed series. A file
that is missing or unreadable gives an empty series with the reason, never an exception.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from ddpdoctor.core.contract import FR_DUMP_GLOB, HEARTBEAT_GLOB, SERIES_GLOB
from ddpdoctor.core.safefile import open_regular

# A page keeps this many step columns at most: a 100k-step run still opens instantly.
MAX_STEPS = 600
_MAX_FILE_BYTES = 256 << 20
WATCH_STRATEGY = "watch"  # the StepSeries read from the watch's series files


@dataclass
class StepSeries:
    """One strategy's steps from the trainer's JSON log: ``[step index][rank]`` matrices.

    ``rank_busy_s`` is each rank's time from the start of the step to the step's gather
    (data + forward): the part of a step where a slow rank differs from its peers, before
    the collective makes every rank equally slow.
    """

    strategy: str
    steps: list[int] = field(default_factory=list)
    step_time_s: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    rank_data_s: list[list[float]] = field(default_factory=list)
    rank_compute_s: list[list[float]] = field(default_factory=list)
    rank_rss_mb: list[list[float]] = field(default_factory=list)
    rank_loss: list[list[float]] = field(default_factory=list)
    downsampled_from: int = 0  # steps before downsampling; 0: not downsampled

    @property
    def world(self) -> int:
        return len(self.rank_data_s[0]) if self.rank_data_s else 0

    @property
    def rank_busy_s(self) -> list[list[float]]:
        return [[d + c for d, c in zip(ds, cs)]
                for ds, cs in zip(self.rank_data_s, self.rank_compute_s)]


@dataclass
class WatchEvent:
    """A finding the in-training checks raised, at the step it was raised."""

    id: str
    severity: str
    step: int
    ranks: list[int]
    title: str


@dataclass
class FrSeqs:
    """Flight Recorder: the last collective each rank enqueued, per process group."""

    by_group: dict[str, dict[int, int]] = field(default_factory=dict)
    source: str = ""


@dataclass
class Heartbeat:
    rank: int
    step: int
    phase: str


@dataclass
class RunSeries:
    """Everything drawable that was found beside a report; ``notes`` say what was not."""

    steps: list[StepSeries] = field(default_factory=list)
    events: list[WatchEvent] = field(default_factory=list)
    fr: FrSeqs = field(default_factory=FrSeqs)
    heartbeats: list[Heartbeat] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _read_bytes(path: str | os.PathLike, limit: int = _MAX_FILE_BYTES) -> bytes:
    # never a FIFO or a symlink planted in a shared run directory
    with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as f:
        return f.read(limit)


def _read_lines(path: str | os.PathLike) -> list[str]:
    return _read_bytes(path).decode("utf-8", "replace").splitlines()


def _row(record: dict, key: str, world: int) -> list[float]:
    values = record.get(key)
    if not isinstance(values, list) or len(values) != world:
        return [float("nan")] * world
    return [float(v) if isinstance(v, (int, float)) else float("nan") for v in values]


def read_json_log(path: str | os.PathLike) -> list[StepSeries]:
    """The trainer's ``--json-log``: one series per strategy, in the order they ran."""
    by_strategy: dict[str, StepSeries] = {}
    for line in _read_lines(path):
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a torn last line of a killed run
        if not isinstance(rec, dict) or rec.get("event") != "step":
            continue
        losses = rec.get("rank_loss")
        if not isinstance(losses, list) or not losses:
            continue
        world = len(losses)
        name = str(rec.get("strategy") or "train")
        s = by_strategy.setdefault(name, StepSeries(name))
        if s.world and s.world != world:
            continue
        s.steps.append(int(rec.get("step") or len(s.steps) + 1))
        s.step_time_s.append(_num(rec.get("step_time_s")))
        s.loss.append(_num(rec.get("loss")))
        s.grad_norm.append(_num(rec.get("grad_norm")))
        s.rank_data_s.append(_row(rec, "rank_data_s", world))
        s.rank_compute_s.append(_row(rec, "rank_compute_s", world))
        s.rank_rss_mb.append(_row(rec, "rank_rss_mb", world))
        s.rank_loss.append(_row(rec, "rank_loss", world))
    return [downsample(s) for s in by_strategy.values()]


def read_watch_series(directory: str | os.PathLike) -> StepSeries | None:
    """The watch's per-rank series files (watch/series_file.py) as one ``StepSeries``.

    Each rank's heartbeat thread samples at its own moments, so the ranks' records end at
    different steps: the columns are the steps of the rank with the most records, and each
    rank's value at a column is its record covering that step (the first ending at or
    after it). The heat map's time to the gather is data wait + forward, known only for
    the intervals holding a step the watch timed; the others are left blank (NaN).
    """
    from bisect import bisect_left

    per_rank: dict[int, list[dict]] = {}
    for p in sorted(Path(directory).glob(SERIES_GLOB)):
        read = _read_rank_series(p)
        if read:
            per_rank[read[0]] = read[1]
    if not per_rank:
        return None
    world = max(per_rank) + 1
    grid = [int(r["step"]) for r in max(per_rank.values(), key=len)]
    keys = {r: [int(x["step"]) for x in recs] for r, recs in per_rank.items()}
    s = StepSeries(WATCH_STRATEGY)
    for g in grid:
        row: list[dict | None] = []
        for r in range(world):
            i = bisect_left(keys.get(r, []), g)
            row.append(per_rank[r][i] if r in per_rank and i < len(per_rank[r]) else None)
        _append_watch_column(s, g, row)
    return downsample(s)


def _read_rank_series(p: Path) -> tuple[int, list[dict]] | None:
    """One rank's series file: (rank, its records in step order), or None if unreadable."""
    try:
        rank = int(p.stem.rsplit("rank", 1)[1])
        lines = _read_lines(p)
    except (OSError, ValueError, IndexError):
        return None
    recs: dict[int, dict] = {}
    for line in lines:
        try:
            rec = json.loads(line)
            step = int(rec["step"])
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line of a killed rank
        if isinstance(rec, dict) and step > 0:
            recs[step] = rec  # a halving rewrite raced an append: last one wins
    return (rank, [recs[k] for k in sorted(recs)]) if recs else None


def _append_watch_column(s: StepSeries, step: int, row: list[dict | None]) -> None:
    """Step ``step``'s column: each rank's record covering it (None: the rank has none)."""
    def col(key: str) -> list[float]:
        return [_num(x.get(key)) if x else float("nan") for x in row]

    finite = [t for t in col("step_time_s") if math.isfinite(t)]
    s.steps.append(step)
    s.step_time_s.append(max(finite) if finite else float("nan"))
    s.rank_data_s.append(col("data_wait_s"))
    s.rank_compute_s.append(col("forward_s"))
    s.rank_rss_mb.append(col("rss_mb"))
    s.rank_loss.append(col("loss"))
    s.loss.append(float("nan"))
    s.grad_norm.append(float("nan"))


def _num(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) else float("nan")


def downsample(s: StepSeries, max_steps: int = MAX_STEPS) -> StepSeries:
    """Keep at most ``max_steps`` columns: each bucket keeps its slowest step's times (a
    spike must stay visible) and its last step's loss, norm and memory."""
    n = len(s.steps)
    if n <= max_steps:
        return s
    out = StepSeries(s.strategy, downsampled_from=n)
    for b in range(max_steps):
        lo, hi = b * n // max_steps, (b + 1) * n // max_steps
        worst = max(range(lo, hi), key=lambda i: _nan_low(s.step_time_s[i]))
        last = hi - 1
        out.steps.append(s.steps[last])
        out.step_time_s.append(s.step_time_s[worst])
        out.rank_data_s.append([max(col) for col in zip(*s.rank_data_s[lo:hi])])
        out.rank_compute_s.append([max(col) for col in zip(*s.rank_compute_s[lo:hi])])
        for name in ("loss", "grad_norm"):
            getattr(out, name).append(getattr(s, name)[last])
        out.rank_rss_mb.append(s.rank_rss_mb[last])
        out.rank_loss.append(s.rank_loss[last])
    return out


def _nan_low(v: float) -> float:
    return v if v == v else float("-inf")


def read_watch_events(path: str | os.PathLike) -> list[WatchEvent]:
    """Findings from a watch events file (``DDPDOCTOR_EVENTS``), each at its first step."""
    seen: dict[tuple[str, tuple[int, ...]], WatchEvent] = {}
    for line in _read_lines(path):
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if not isinstance(ev, dict) or ev.get("kind") != "finding" or "id" not in ev:
            continue
        try:
            ranks = tuple(sorted(int(r) for r in ev.get("ranks") or ()))
            step = int(ev.get("step") or 0)
        except (TypeError, ValueError):
            continue
        key = (str(ev["id"]), ranks)
        if key not in seen or step < seen[key].step:
            seen[key] = WatchEvent(str(ev["id"]), str(ev.get("severity") or "warning"), step,
                                   list(ranks), str(ev.get("title") or ""))
    return sorted(seen.values(), key=lambda e: (e.step, e.id))


def read_fr_dir(directory: str | os.PathLike) -> FrSeqs:
    """Per-rank Flight Recorder dumps written by the watch's dump hook."""
    from ddpdoctor.attach.flight_recorder import FrParseError, parse_fr_trace

    out = FrSeqs(source=str(directory))
    for p in sorted(Path(directory).glob(FR_DUMP_GLOB)):
        try:
            rank = int(p.stem.rsplit("rank", 1)[1])
            trace = parse_fr_trace(_read_bytes(p), rank)
        except (OSError, ValueError, FrParseError):
            continue
        for pg, seq in trace.last_enqueued.items():
            out.by_group.setdefault(pg, {})[rank] = seq
    return out


def read_heartbeats(directory: str | os.PathLike) -> list[Heartbeat]:
    out = []
    for p in sorted(Path(directory).glob(HEARTBEAT_GLOB)):
        try:
            data = json.loads(_read_bytes(p, 1 << 20))
            out.append(Heartbeat(int(data["rank"]), int(data.get("step") or 0),
                                 str(data.get("phase") or "")))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(out, key=lambda h: h.rank)
