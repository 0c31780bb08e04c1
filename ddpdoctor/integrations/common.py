"""What the framework callbacks share: a sink that holds findings and metrics until the
training thread hands them to the framework's logger, the scalar names they are logged
under, and the console line a finding prints once (with its rank and playbook).

Framework loggers (Lightning's, the HF Trainer's report_to integrations, accelerate's
trackers) are called from the training thread and, for most, on global rank 0 only: the
cross-rank findings and every rank's metrics of a check step are made there (rank 0
analyses the all_gather), so rank 0's logger holds the whole picture.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

from ddpdoctor.core.findings import Finding
from ddpdoctor.watch.stream import Sink, StepMetrics, finding_text

if TYPE_CHECKING:
    import torch

    # the framework callbacks name the watcher through this file (the layers' one edge)
    from ddpdoctor.watch.api import Watcher, WatchSettings

PREFIX = "ddpdoctor"


class ConsoleLogger(Protocol):
    """A framework's logger (a ``logging.Logger``, or accelerate's adapter around one)."""

    def log(self, level: int, text: str, /) -> None: ...


@dataclass(frozen=True)
class Emitted:
    finding: Finding
    step: int
    rank: int  # the rank whose watch emitted it (the culprits are finding.ranks)


class BufferSink(Sink):
    """Findings and metrics kept for the training thread (any thread may add)."""

    def __init__(self, maxlen: int = 4096) -> None:
        self._findings: deque[Emitted] = deque(maxlen=maxlen)
        self._metrics: deque[StepMetrics] = deque(maxlen=maxlen)
        self._lock = threading.Lock()

    def finding(self, finding: Finding, step: int, rank: int) -> None:
        with self._lock:
            self._findings.append(Emitted(finding, step, rank))

    def metrics(self, records: list[StepMetrics]) -> None:
        with self._lock:
            self._metrics.extend(records)

    def drain(self, with_metrics: bool = True) -> tuple[list[Emitted], list[StepMetrics]]:
        """The findings so far, and the metrics too when ``with_metrics`` (else they wait
        for a step the framework logs anyway)."""
        with self._lock:
            found, values = list(self._findings), list(self._metrics) if with_metrics else []
            self._findings.clear()
            if with_metrics:
                self._metrics.clear()
        return found, values


class ConsoleSink(Sink):
    """A finding, once, on the framework's own logger (its console handler)."""

    def __init__(self, logger: ConsoleLogger) -> None:
        self.logger = logger

    def finding(self, finding: Finding, step: int, rank: int) -> None:
        text = f"[rank{rank}] {finding_text(finding, step)}"
        level = logging.ERROR if finding.severity == "error" else logging.WARNING
        self.logger.log(level, text)


def culprit_label(ranks: Iterable[int]) -> str:
    ranks = list(ranks)
    return "rank" + "_".join(map(str, ranks)) if ranks else "all"


def finding_key(finding: Finding) -> str:
    """``ddpdoctor/finding/<ID>/rank<R>`` (e.g. GRAD_NONFINITE, rank1): the id and the culprit
    ranks."""
    return f"{PREFIX}/finding/{finding.id}/{culprit_label(finding.ranks)}"


def metric_key(rank: int, name: str) -> str:
    """``ddpdoctor/rank<R>/<metric>`` (e.g. rank1, step_time_s): one series per rank and metric."""
    return f"{PREFIX}/rank{rank}/{name}"


def scalars(found: list[Emitted], records: list[StepMetrics]) -> dict[str, float]:
    """One flat dict of numbers, what every framework logger takes; the newest value of a
    metric wins. A finding is logged as 1.0 under its key."""
    out: dict[str, float] = {}
    for rec in records:
        for name, value in rec.values().items():
            out[metric_key(rec.rank, name)] = value
    for e in found:
        out[finding_key(e.finding)] = 1.0
    return out


def watch_with_sinks(model: torch.nn.Module | None, optimizer: object, dataloader: object,
                     console: ConsoleLogger,
                     settings: WatchSettings) -> tuple[Watcher, BufferSink]:
    """``ddpdoctor.watch`` with the framework's console in place of Python warnings and
    ``ddpdoctor.watch`` log records (so a finding prints once), and a buffer."""
    from ddpdoctor.watch.api import watch

    buffer = BufferSink()
    opts: WatchSettings = {"warn": False, "log": False, **settings}
    # the frameworks type the model optional; it is there once training starts
    handle = watch(cast("torch.nn.Module", model), torch_optimizer(optimizer),
                   torch_loaders(dataloader),
                   sinks=[buffer, ConsoleSink(console)], **opts)
    return handle, buffer


def torch_optimizer(optimizer: object) -> torch.optim.Optimizer | None:
    """The torch optimizer inside a framework's wrapper (accelerate's AcceleratedOptimizer,
    Lightning's LightningOptimizer): its step hooks fire on real steps only."""
    seen = 0
    while optimizer is not None and hasattr(optimizer, "optimizer") and seen < 4:
        optimizer, seen = optimizer.optimizer, seen + 1
    # found by attribute name (no torch import here to check the class)
    return cast("torch.optim.Optimizer | None", optimizer)


def torch_loaders(loader: object) -> list[object] | None:
    """torch DataLoaders inside framework adapters (accelerate's DataLoaderShard keeps
    the real one as ``base_dataloader``; Lightning may hand a list or dict)."""
    if loader is None:
        return None
    if isinstance(loader, dict):
        loader = list(loader.values())
    items = loader if isinstance(loader, (list, tuple)) else [loader]
    return [getattr(ld, "base_dataloader", ld) for ld in items]
