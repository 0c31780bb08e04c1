"""The hang watchdog and the heartbeat file: one background thread per process.

Watchers report progress (a step boundary, a forward) with a few attribute writes, no
clock read; the thread does everything else: it turns a changed tick count into the time
of the last progress, and every ``heartbeat_interval_s`` it rewrites
``$DDPDOCTOR_HEARTBEAT_DIR/rank{R}.json`` (step, time, phase, memory; what ``ddpdoctor
run`` reads for progress), and when no progress came for ``hang_timeout_s`` it dumps every
thread's Python stack of this rank (and a Flight Recorder trace when enabled) and emits a
``stall`` event, once per stuck step.
"""

from __future__ import annotations

import atexit
import faulthandler
import json
import os
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, SupportsFloat

from ddpdoctor.core import safefile
from ddpdoctor.core.contract import HEARTBEAT_SCHEMA, heartbeat_file, stacks_file
from ddpdoctor.core.threadname import name_this_thread
from ddpdoctor.nvml.model import throttled
from ddpdoctor.watch.events import series_path
from ddpdoctor.watch.gpu_metrics import GpuMetrics
from ddpdoctor.watch.series_file import SeriesRecord, SeriesWriter, Sums, interval
from ddpdoctor.watch.stream import StepMetrics

if TYPE_CHECKING:
    import torch

    from ddpdoctor.watch.config import WatchConfig
    from ddpdoctor.watch.stream import EventStream

_lock = threading.Lock()
_monitor: Monitor | None = None


def write_json_atomic(path: str, data: dict) -> None:
    # unpredictable O_EXCL temp name, rename over the link (never through it): the
    # heartbeat dir may be writable by another user than the one root-run ddpdoctor is
    safefile.write_atomic(path, json.dumps(data), 0o644)


class Monitor:
    def __init__(self, rank: int, cfg: WatchConfig, sink: EventStream) -> None:
        self.rank, self.cfg, self.sink = rank, cfg, sink
        self.step = 0
        self.phase = "starting"
        self.ticks = 0  # progress calls so far: the thread compares, the hot path only counts
        self._seen: tuple[int, int] = (0, 0)  # (ticks, step) at the thread's last look
        self.last_progress = time.time()
        self.last_step_time: float | None = None
        self.step_s: float | None = None
        self.mem: int | None = None
        self.mem_history: list[tuple[int, int]] = []
        self.started = False  # the watchdog fires only once training has begun
        self.stalled_step = -1
        self.users = 0
        self.paused = 0  # watchers paused (evaluation, checkpointing): no stall meanwhile
        self.status = "running"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sums: Sums = (0, 0.0, 0.0, 0.0, 0)
        self._sums_seen: Sums = self.sums
        self._series_lock = threading.Lock()  # the thread and the atexit stop() both sample
        path = series_path(getattr(sink, "path", None), rank)
        self.series = SeriesWriter(path) if path else None
        self.heartbeat_path = (os.path.join(cfg.heartbeat_dir, heartbeat_file(rank))
                               if cfg.heartbeat_dir else None)
        # the model's device (set by the watch); its GPU is opened on the thread, lazily
        self.gpu_device: torch.device | None = None
        self._gpu: GpuMetrics | None = None
        self._gpu_opened = False

    # -- called from the training thread: attribute writes only (they run every step)
    def progress(self, step: int, phase: str) -> None:
        self.step, self.phase = step, phase
        self.ticks += 1

    def boundary(self, step: int, step_s: float, data_s: float = 0.0, fwd_s: float = 0.0,
                 timed: bool = False) -> None:
        # one tuple a step: the series sampler reads the running sums from the thread
        sums = self.sums
        self.sums = ((step, sums[1] + step_s, sums[2] + data_s, sums[3] + fwd_s,
                      sums[4] + 1) if timed else (step, sums[1] + step_s) + sums[2:])
        # most steps run no forward hook (watch/first_grad.py): "forward" is marked only
        # on some, so until the first gradient the phase is data loading or the forward
        self.step, self.phase, self.step_s = step, "data/forward", step_s
        self.ticks += 1

    def memory(self, value: int) -> None:
        self.mem = value
        self.mem_history.append((self.step, value))
        del self.mem_history[:-32]

    def pause(self) -> None:
        self.paused += 1

    def resume(self) -> None:
        # the pause was not a stall: the wait for the next step starts now
        self.last_progress = time.time()
        self.ticks += 1
        self.paused = max(0, self.paused - 1)

    # -- the thread
    def start(self) -> None:
        if self._thread is None:
            if self.heartbeat_path:
                os.makedirs(os.path.dirname(self.heartbeat_path), exist_ok=True)
            self._thread = threading.Thread(target=self._run, name="ddpdoctor-watchdog",
                                            daemon=True)
            self._thread.start()
            self._heartbeat()
            # a clean exit says so; a killed rank's file keeps its last "running" beat
            atexit.register(self.stop)

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self.status = "closed"
        self._stop.set()
        self._observe()  # the last beat carries the last step
        self._heartbeat()
        try:
            self._sample_series(final=True)
        except Exception:  # exiting: nothing more to do
            pass

    def _observe(self) -> None:
        """Progress times, to the thread's interval: the training thread reads no clock."""
        ticks, step = self.ticks, self.step
        if ticks == self._seen[0]:
            return
        now = time.time()
        self.last_progress, self.started = now, True
        if step != self._seen[1]:
            self.last_step_time = now
        self._seen = (ticks, step)

    def _run(self) -> None:
        name_this_thread("ddpdoctor-watch")  # run leaves this thread's CPU out of the rank's
        interval = max(0.05, min(self.cfg.heartbeat_interval_s, self.cfg.hang_timeout_s / 4))
        while not self._stop.wait(interval):
            try:
                self._observe()
                self._check_stall()
                self._heartbeat()
                self._sample_series()
            except Exception:  # the watchdog must never take a rank down
                pass

    def _sample_series(self, final: bool = False) -> None:
        """One record for the steps since the last wake (watch/series_file.py), to the
        series file and, as metrics, to the stream's sinks."""
        if self.paused and not final:
            return  # a pause is no step: its time is not in the sums either
        from ddpdoctor.watch.memory import rss_bytes

        with self._series_lock:
            now = self.sums
            if now[0] < self._sums_seen[0]:
                self._sums_seen = now  # a new watcher counts from 1 again
            rec = interval(self._sums_seen, now, self.rank,
                           rss_bytes() if now[0] > self._sums_seen[0] else None)
            if rec is not None:
                rec = self._with_gpu(rec)
                self._sums_seen = now
                if self.series is not None:
                    self.series.add(rec)
            if final and self.series is not None:
                self.series.flush()
        if self.started:
            self._publish(rec)

    def _with_gpu(self, rec: SeriesRecord) -> SeriesRecord:
        """The interval's record with this rank's GPU as it is now (no GPU: as it was)."""
        try:
            if not self._gpu_opened:
                self._gpu_opened = True
                self._gpu = GpuMetrics.open(self.gpu_device)
                if self._gpu is not None and self._gpu.skipped:
                    self.sink.event("gpu_metrics", rec.step,
                                    skipped=f"NVML: {self._gpu.skipped}; the allocator's "
                                            "bytes only")
            if self._gpu is None:
                return rec
            g = self._gpu.sample()
        except Exception as e:  # the step series must not go with it
            self._gpu = None
            self.sink.event("gpu_metrics", rec.step, skipped=f"{type(e).__name__}: {e}")
            return rec
        n = g.nvml
        return replace(rec, cuda_allocated_mb=g.allocated_mb, cuda_reserved_mb=g.reserved_mb,
                       gpu_util_pct=n.util_pct if n else None,
                       gpu_memory_used_mb=n.memory_used_mb if n else None,
                       gpu_clock_events=list(n.clock_events) if n and n.clock_events is not None
                       else None)

    def _publish(self, rec: SeriesRecord | None) -> None:
        """This rank's metrics for the interval; with no step in it, the heartbeat age
        alone (a stalled rank's age keeps growing where a dashboard sees it)."""
        publish = getattr(self.sink, "metrics", None)
        if publish is None:
            return
        last = getattr(self.sink, "last", {})
        age = round(max(0.0, time.time() - self.last_progress), 3)
        if rec is None:
            publish([StepMetrics(self.rank, self.step, "interval", 0, heartbeat_age_s=age)])
            return
        publish([StepMetrics(
            self.rank, rec.step, "interval", rec.steps, step_time_s=rec.step_time_s,
            data_wait_s=rec.data_wait_s, compute_s=rec.forward_s, memory_mb=rec.rss_mb,
            grad_norm=_number(last.get("grad_norm")), loss=_number(last.get("loss")),
            heartbeat_age_s=age, gpu_util_pct=rec.gpu_util_pct,
            gpu_memory_used_mb=rec.gpu_memory_used_mb, cuda_allocated_mb=rec.cuda_allocated_mb,
            cuda_reserved_mb=rec.cuda_reserved_mb, gpu_throttled=_throttled(rec))])

    def _check_stall(self) -> None:
        if not self.started or self.paused or "hang" not in self.cfg.checks:
            return
        waited = time.time() - self.last_progress
        if waited < self.cfg.hang_timeout_s or self.stalled_step == self.step:
            return
        self.stalled_step = self.step
        self.status = "stalled"
        stacks = self.dump_stacks()
        fr = None
        if self.cfg.fr_dir:
            from ddpdoctor.watch import flight_recorder

            fr = flight_recorder.dump(self.cfg.fr_dir, self.rank)
        self.sink.event("stall", self.step + 1, waited_s=round(waited, 1), phase=self.phase,
                        stacks=stacks, fr_trace=fr)

    def dump_stacks(self) -> str | None:
        base = self.cfg.fr_dir or self.cfg.heartbeat_dir
        if not base and self.sink.path:
            base = os.path.dirname(os.path.abspath(self.sink.path))
        if not base:
            return None
        os.makedirs(base, exist_ok=True)
        path = os.path.join(base, stacks_file(self.rank))
        fd = safefile.open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(f"# ddpdoctor: rank {self.rank} pid {os.getpid()} stuck in step "
                    f"{self.step + 1} ({self.phase}) at {time.time():.3f}\n")
            f.flush()
            faulthandler.dump_traceback(file=f, all_threads=True)
        return path

    def _heartbeat(self) -> None:
        if not self.heartbeat_path:
            return
        if self.status == "stalled" and time.time() - self.last_progress < 1:
            self.status = "running"
        status = "paused" if self.paused and self.status != "closed" else self.status
        write_json_atomic(self.heartbeat_path, {
            "schema": HEARTBEAT_SCHEMA, "rank": self.rank, "pid": os.getpid(),
            "local_rank": os.environ.get("LOCAL_RANK"), "step": self.step,
            "phase": self.phase, "status": status, "time": time.time(),
            "last_progress": self.last_progress, "last_step_time": self.last_step_time,
            "step_s": self.step_s, "memory_bytes": self.mem,
            "memory_history": self.mem_history[-16:]})


def _number(value: SupportsFloat | None) -> float | None:
    """A noted value as a float: the training thread may note a tensor (a loss) so that
    reading it (a device sync) happens here, off the training thread."""
    if value is None:
        return None
    try:
        return float(value.detach()) if hasattr(value, "detach") else float(value)
    except (TypeError, ValueError, RuntimeError):
        return None


def _throttled(rec: SeriesRecord) -> float | None:
    t = throttled(rec.gpu_clock_events)
    return None if t is None else float(t)


def acquire(rank: int, cfg: WatchConfig, sink: EventStream) -> Monitor:
    """The process's monitor (the first watcher's settings win); started on first use."""
    global _monitor
    with _lock:
        if _monitor is None or _monitor._stop.is_set():
            _monitor = Monitor(rank, cfg, sink)
        _monitor.users += 1
        _monitor.start()
        return _monitor


def release(monitor: Monitor) -> None:
    global _monitor
    with _lock:
        monitor.users -= 1
        if monitor.users <= 0:
            monitor.stop()
            if _monitor is monitor:
                _monitor = None
