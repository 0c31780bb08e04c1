"""Prometheus: ``ddpdoctor.watch(..., metrics_port=N)`` or ``ddpdoctor run --metrics-port N``.

Each rank serves its own ``/metrics`` (the standard text exposition, prometheus_client)
on port ``N + LOCAL_RANK`` (``N`` itself with port 0: any free port, for tests), bound to
127.0.0.1 unless ``metrics_host`` / ``DDPDOCTOR_METRICS_HOST`` says otherwise. Every
series carries ``rank``, ``host`` and ``job`` (``DDPDOCTOR_METRICS_JOB``, else
``TORCHELASTIC_RUN_ID``, else "ddpdoctor"). A rank exports its own step metrics (the
heartbeat thread's interval means); rank 0 also exports every rank's straggler score,
which only its analysis of the all_gather knows. Findings count in
``ddpdoctor_findings_total`` by id, severity and culprit ranks, on the rank that found
them. Nothing here runs on the training thread but a counter increment per finding.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import TYPE_CHECKING, Protocol, TypedDict, cast

from ddpdoctor.core import redact
from ddpdoctor.core.contract import METRICS_JOB
from ddpdoctor.core.findings import Finding, format_ranks
from ddpdoctor.watch.stream import Sink, StepMetrics

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from ddpdoctor.watch.stream import EventStream

log = logging.getLogger("ddpdoctor.watch")
JOB_ENV = METRICS_JOB
LABELS = ("rank", "host", "job")
# StepMetrics field -> (metric name, help, scale to the base unit)
GAUGES: dict[str, tuple[str, str, float]] = {
    "step_time_s": ("ddpdoctor_step_time_seconds", "Mean optimizer step time", 1.0),
    "data_wait_s": ("ddpdoctor_data_wait_seconds", "Mean time a step waited for data", 1.0),
    "compute_s": ("ddpdoctor_compute_seconds", "Mean forward time before the all-reduce", 1.0),
    "memory_mb": ("ddpdoctor_memory_rss_bytes", "Resident memory of the rank", 2.0 ** 20),
    "straggler_score_s": ("ddpdoctor_straggler_score_seconds",
                          "Local time (data + forward) over the peers' median", 1.0),
    "grad_norm": ("ddpdoctor_grad_norm", "Total 2-norm of the gradients at a check step", 1.0),
    "loss": ("ddpdoctor_loss", "Training loss, where the framework reports it", 1.0),
    "heartbeat_age_s": ("ddpdoctor_heartbeat_age_seconds",
                        "Seconds since the rank last made progress", 1.0),
    "gpu_util_pct": ("ddpdoctor_gpu_utilization_percent",
                     "Share of the last sample period the rank's GPU was busy (NVML)", 1.0),
    "gpu_memory_used_mb": ("ddpdoctor_gpu_memory_used_bytes",
                           "Memory used on the rank's GPU by every process (NVML)", 2.0 ** 20),
    "cuda_allocated_mb": ("ddpdoctor_cuda_allocated_bytes",
                          "Bytes PyTorch's caching allocator has handed out", 2.0 ** 20),
    "cuda_reserved_mb": ("ddpdoctor_cuda_reserved_bytes",
                         "Bytes PyTorch's caching allocator holds from the driver", 2.0 ** 20),
    "gpu_throttled": ("ddpdoctor_gpu_throttled",
                      "1 while the GPU's clocks are held down for power or heat (NVML)", 1.0),
}
_lock = threading.Lock()


class _Server(TypedDict, total=False):
    sink: PrometheusSink
    port: int
    server: object  # the HTTP server: held, never called


_server: _Server = {}  # one endpoint per process, shared by its watchers


class EndpointSettings(Protocol):
    """The endpoint's settings (watch/config.py WatchConfig)."""

    @property
    def metrics_port(self) -> int | None: ...

    @property
    def metrics_host(self) -> str: ...


class Served(Protocol):
    """The watcher as its endpoint sees it (watch/api.py Watcher, which imports this
    file: named by its shape)."""

    metrics_url: str | None

    @property
    def cfg(self) -> EndpointSettings: ...

    @property
    def stream(self) -> EventStream: ...

    @property
    def step(self) -> int: ...


class PrometheusSink(Sink):
    def __init__(self, registry: CollectorRegistry, host: str, job: str) -> None:
        from prometheus_client import Counter, Gauge

        self.host, self.job = host, job
        self.gauges = {f: Gauge(name, text, LABELS, registry=registry)
                       for f, (name, text, _) in GAUGES.items()}
        self.step = Gauge("ddpdoctor_step", "Last optimizer step seen", LABELS,
                          registry=registry)
        self.steps = Counter("ddpdoctor_steps", "Optimizer steps", LABELS, registry=registry)
        self.findings = Counter("ddpdoctor_findings", "Findings by id and culprit ranks",
                                LABELS + ("id", "severity", "culprit_ranks"),
                                registry=registry)

    def labels(self, rank: int) -> tuple[str, str, str]:
        return str(rank), self.host, self.job

    def metrics(self, records: list[StepMetrics]) -> None:
        for rec in records:
            own = rec.source == "interval"
            for name, value in rec.values().items():
                # a rank's own step times come from its own endpoint; rank 0's check
                # records add only what no other rank knows (the straggler score)
                if own or name == "straggler_score_s":
                    self.gauges[name].labels(*self.labels(rec.rank)).set(value * GAUGES[name][2])
            if own and rec.steps:
                self.step.labels(*self.labels(rec.rank)).set(rec.step)
                self.steps.labels(*self.labels(rec.rank)).inc(rec.steps)

    def finding(self, finding: Finding, step: int, rank: int) -> None:
        self.findings.labels(*self.labels(rank), finding.id, finding.severity,
                             format_ranks(finding.ranks) if finding.ranks else "all").inc()


def _job() -> str:
    # a label is one more view: the same scrub as the report (a job name can quote a token)
    return redact.text(os.environ.get(JOB_ENV) or os.environ.get("TORCHELASTIC_RUN_ID")
                       or "ddpdoctor")


def rank_port(base: int) -> int:
    """``base + LOCAL_RANK``: the ranks of one host each get a port; 0 stays 0 (any)."""
    if base == 0:
        return 0
    try:
        return base + int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        return base


def serve(port: int, host: str = "127.0.0.1") -> tuple[PrometheusSink, int]:
    """This process's endpoint (started once): its sink and the port it listens on."""
    with _lock:
        if "sink" not in _server:
            from prometheus_client import CollectorRegistry, start_http_server

            registry = CollectorRegistry(auto_describe=True)
            sink = PrometheusSink(registry, socket.gethostname(), _job())
            server, _ = start_http_server(rank_port(port), addr=host, registry=registry)
            _server.update({"sink": sink, "port": server.server_port, "server": server})
        return _server["sink"], _server["port"]


def serve_for(w: Served) -> None:
    """Start (or reuse) the endpoint and plug it into watcher ``w``'s stream. A port in
    use or prometheus_client missing is logged, never raised: training goes on."""
    try:
        # watch() serves only where metrics_port is set
        sink, port = serve(cast(int, w.cfg.metrics_port), w.cfg.metrics_host)
    except (ImportError, OSError) as e:
        log.warning("ddpdoctor: no Prometheus endpoint on %s:%s (%s)", w.cfg.metrics_host,
                    w.cfg.metrics_port, e)
        return
    w.metrics_url = f"http://{w.cfg.metrics_host}:{port}/metrics"
    if sink not in w.stream.sinks:
        w.stream.add(sink)
    w.stream.write({"kind": "metrics_endpoint", "url": w.metrics_url}, w.step)
