"""One event stream out of watch: findings, events and per-step metrics into pluggable sinks.

A watcher emits into its :class:`EventStream`; the stream fans out to its sinks. The three
sinks every watcher has reproduce what watch always did: a Python warning
(:class:`WarningSink`), a log record on ``ddpdoctor.watch`` (:class:`LoggingSink`) and a
JSON line (:class:`JsonlSink`). Others plug in with :meth:`EventStream.add`: the framework
callbacks (ddpdoctor/integrations/) and the Prometheus exporter.

Metrics come from two places, neither on the hot path of an ordinary step: the
heartbeat thread, once per interval, with this rank's means since the last one
(``source="interval"``, see watch/series_file.py), and rank 0's analysis of a check step,
with every rank's times as the all_gather brought them (``source="check"``). Sinks are
called on those threads; a sink that must act on the training thread buffers (see
integrations/buffer.py). No torch here.
"""

from __future__ import annotations

import json
import logging
import os
import time
import warnings
from dataclasses import asdict, dataclass

from ddpdoctor.core.contract import EVENTS_SCHEMA
from ddpdoctor.core.findings import Finding, format_ranks

SCHEMA = EVENTS_SCHEMA
log = logging.getLogger("ddpdoctor.watch")
# Library convention: records reach the user's handlers, but without any configured the
# warning itself is the one line on stderr (no duplicate from logging's last resort).
log.addHandler(logging.NullHandler())


class DDPDoctorWarning(UserWarning):
    """The category of every warning ddpdoctor.watch() emits; the finding id is in the text.

    Silence with ``warnings.simplefilter("ignore", ddpdoctor.DDPDoctorWarning)``, or turn
    into errors with ``-W error::ddpdoctor.DDPDoctorWarning``.
    """


@dataclass(frozen=True)
class StepMetrics:
    """One rank's metrics: per-step means over ``steps`` steps ending at ``step``.

    ``source``: "interval" (this rank's own, from the heartbeat thread) or "check" (any
    rank's, from rank 0's analysis of a check step). None: not measured in that window.
    """

    rank: int
    step: int
    source: str
    steps: int = 1
    step_time_s: float | None = None
    data_wait_s: float | None = None
    compute_s: float | None = None          # forward (the local work before the all-reduce)
    memory_mb: float | None = None
    straggler_score_s: float | None = None  # local time over the peers' median
    grad_norm: float | None = None
    loss: float | None = None
    heartbeat_age_s: float | None = None    # seconds since this rank last made progress
    # this rank's GPU (watch/gpu_metrics.py): NVML's, then PyTorch's allocator's
    gpu_util_pct: float | None = None
    gpu_memory_used_mb: float | None = None  # the whole device, every process on it
    cuda_allocated_mb: float | None = None
    cuda_reserved_mb: float | None = None
    gpu_throttled: float | None = None       # 1: a clock-event reason beyond normal operation

    def values(self) -> dict[str, float]:
        """The measured values by name (no None, no bookkeeping fields)."""
        skip = ("rank", "step", "source", "steps")
        return {k: float(v) for k, v in asdict(self).items() if k not in skip and v is not None}


def finding_text(finding: Finding, step: int) -> str:
    """The one line every console sink prints: id, severity, culprit rank, playbook."""
    where = f"rank {format_ranks(finding.ranks)}" if finding.ranks else "all ranks"
    return (f"ddpdoctor {finding.id} ({finding.severity}, {where}, step {step}): "
            f"{finding.title} -- `ddpdoctor playbook {finding.playbook}`")


class Sink:
    """What a sink may receive; every method is optional (the base ignores it)."""

    def finding(self, finding: Finding, step: int, rank: int) -> None:
        pass

    def event(self, kind: str, step: int, rank: int, data: dict[str, object]) -> None:
        pass

    def metrics(self, records: list[StepMetrics]) -> None:
        pass

    def close(self) -> None:
        pass


class WarningSink(Sink):
    def finding(self, finding: Finding, step: int, rank: int) -> None:
        # A user who turned DDPDoctorWarning into errors gets the exception here. Raised
        # from a hook deep inside torch: no frame of the caller's means anything, so the
        # warning names the watch, the rank and (as its "line") the step.
        warnings.warn_explicit(finding_text(finding, step), DDPDoctorWarning,
                               f"ddpdoctor.watch rank {rank}", step, module="ddpdoctor.watch")


class LoggingSink(Sink):
    def finding(self, finding: Finding, step: int, rank: int) -> None:
        level = logging.ERROR if finding.severity == "error" else logging.WARNING
        log.log(level, finding_text(finding, step))

    def event(self, kind: str, step: int, rank: int, data: dict[str, object]) -> None:
        log.warning("ddpdoctor %s (rank %d, step %d): %s", kind, rank, step,
                    json.dumps(data, default=str)[:500])


class JsonlSink(Sink):
    """One JSON object per line. Several ranks may append to one file: each line is one
    ``write`` on an ``O_APPEND`` descriptor, so lines never interleave."""

    def __init__(self, path: str, rank: int) -> None:
        self.path, self.rank = path, rank

    def finding(self, finding: Finding, step: int, rank: int) -> None:
        self.write({"kind": "finding", **finding.to_dict()}, step)

    def event(self, kind: str, step: int, rank: int, data: dict[str, object]) -> None:
        self.write({"kind": kind, **data}, step)

    def write(self, record: dict[str, object], step: int) -> None:
        line = {"schema": SCHEMA, "rank": self.rank, "step": step, "time": time.time(),
                **record}
        data = (json.dumps(line, default=str) + "\n").encode()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as e:  # a full disk must not stop training
            log.debug("ddpdoctor: cannot write events to %s: %s", self.path, e)


class EventStream:
    """A watcher's findings, events and metrics, fanned out to its sinks."""

    def __init__(self, path: str | None, rank: int, warn: bool = True,
                 log_records: bool = True) -> None:
        self.path = path.replace("{rank}", str(rank)) if path else None
        self.rank = rank
        self._jsonl = JsonlSink(self.path, rank) if self.path else None
        self.sinks: list[Sink] = [s for s, on in ((self._jsonl, self._jsonl is not None),
                                                  (LoggingSink(), log_records),
                                                  (WarningSink(), warn))
                                   if on and s is not None]
        self._seen: set[tuple[str, tuple[int, ...]]] = set()
        self.last: dict[str, float] = {}  # latest value per metric, for the next interval

    def add(self, sink: Sink) -> Sink:
        self.sinks.append(sink)
        return sink

    def remove(self, sink: Sink) -> None:
        self.sinks = [s for s in self.sinks if s is not sink]

    def finding(self, finding: Finding, step: int, once: bool = True) -> bool:
        """Emit ``finding``; with ``once`` a repeat of the same id and ranks is dropped."""
        key = (finding.id, tuple(finding.ranks))
        if once and key in self._seen:
            return False
        self._seen.add(key)
        finding.evidence.setdefault("step", step)
        # Every sink (warning, log, JSONL, framework logger, Prometheus) gets the one scrub.
        finding = finding.redacted()
        for sink in list(self.sinks):
            self._call(sink, "finding", finding, step, self.rank)
        return True

    def event(self, kind: str, step: int, **data: object) -> None:
        for sink in list(self.sinks):
            self._call(sink, "event", kind, step, self.rank, data)

    def write(self, record: dict[str, object], step: int) -> None:
        """A raw line into the JSONL file only (notes, dumps)."""
        if self._jsonl is not None:
            self._jsonl.write(record, step)

    def metrics(self, records: list[StepMetrics]) -> None:
        if not records:
            return
        for sink in list(self.sinks):
            self._call(sink, "metrics", records)

    def note(self, name: str, value: float) -> None:
        """A value known between intervals (loss, grad norm): it rides in the next one."""
        self.last[name] = value

    def close(self) -> None:
        for sink in list(self.sinks):
            self._call(sink, "close")

    @staticmethod
    def _call(sink: Sink, method: str, *args: object) -> None:
        try:
            getattr(sink, method)(*args)
        except Warning:
            raise  # -W error::DDPDoctorWarning: the user asked for it
        except Exception as e:  # one broken sink must not stop the others
            log.debug("ddpdoctor: sink %s.%s failed: %r", type(sink).__name__, method, e)
