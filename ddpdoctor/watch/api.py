"""``ddpdoctor.watch(model, optimizer=None, dataloader=None, ...)``: in-training checks.

The watcher only reads: a tensor hook on the parameter whose gradient comes first in
backward (``first_grad``: before any all-reduce), optimizer step pre/post hooks (the
optimizer's own, or the global ones bound to the first optimizer that steps this model's
parameters), instance-level DataLoader taps, and module forward hooks, the last only on
the steps that need them where the first gradient is seen (each costs ~20 us a step on a
busy CPU), on every step for FSDP and tensor-parallel models (watch/hooks.py).
The step boundary is the optimizer post-hook from the first step (watch/steps.py: a
forward never is, unless no optimizer steps at all). Cross-rank checks meet in one
asynchronous all_gather every ``every`` steps (watch/exchange.py). Findings, events and
metrics leave through one stream into sinks (watch/stream.py). ``pause()`` takes every
hook off until ``resume()`` (evaluation, checkpoint saving: not steps, and not stalls).
A failure inside the watcher disables it and is logged; it never raises into the
training loop (except a DDPDoctorWarning turned into an error on purpose with ``-W error``).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING

from ddpdoctor.core.findings import Finding
from ddpdoctor.watch import hang_watchdog, registry
from ddpdoctor.watch import join as join_hooks
from ddpdoctor.watch.config import (
    COLLECTIVE_CHECKS,
    ConfigSettings,
    WatchConfig,
    WatchSettings,
    from_env,
)
from ddpdoctor.watch.exchange import Exchange, release_groups
from ddpdoctor.watch.hooks import HookSet
from ddpdoctor.watch.introspect import clean_name, describe, env_int
from ddpdoctor.watch.join import JoinTracker
from ddpdoctor.watch.step_hooks import StepClock, StepHooks
from ddpdoctor.watch.stream import EventStream, Sink, StepMetrics

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup
    from typing_extensions import Unpack

    from ddpdoctor.watch.context import TimedStep
    from ddpdoctor.watch.sampler import LoaderTap

__all__ = ["watch", "Watcher", "WatchSettings", "clean_name"]
log = logging.getLogger("ddpdoctor.watch")
_WATCHERS: weakref.WeakKeyDictionary[torch.nn.Module, Watcher] = weakref.WeakKeyDictionary()


class _Settings(ConfigSettings, total=False):
    _how: str  # how it attached: said in run's report
    _gather: bool  # False: no collective (not every rank is here)


def watch(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
          dataloader: object = None, every: int | None = None,
          checks: Iterable[str] | str | None = None, events_path: str | None = None,
          sinks: Iterable[Sink] = (), **settings: Unpack[_Settings]) -> Watcher:
    """Watch ``model`` (plain, DDP, FSDP/FSDP2, with any optimizer incl. ZeRO) in training.

    Returns the handle (also a context manager); ``handle.close()`` removes every hook.
    Watching a model twice returns the first handle (adding the optimizer / loader / sinks
    given). ``sinks``: more destinations for findings and metrics (watch/stream.py).
    Settings: see :class:`ddpdoctor.watch.config.WatchConfig` (``metrics_port`` serves
    Prometheus metrics); env overrides apply.
    """
    how = str(settings.pop("_how", "watch()"))  # how it attached: said in run's report
    gather = bool(settings.pop("_gather", True))  # False: no collective (not every rank is here)
    existing = _WATCHERS.get(model)
    if existing is not None and not existing.closed:
        existing.add(optimizer=optimizer, dataloader=dataloader)
        for s in sinks:
            existing.stream.add(s)
        return existing
    cfg = from_env(every=every, checks=checks, events_path=events_path, **settings)
    w = Watcher(model, cfg, optimizer, dataloader, sinks=sinks, gather=gather)
    if w.stream.path:
        from ddpdoctor.core.attachment import Attachment

        Attachment(w.rank, type(model).__name__, w.wrapper, how, time.time()).write(
            w.stream.path)
    return w


class Watcher(StepHooks):
    """One watched model: the context every check reads (watch/context.py)."""

    def __init__(self, model: torch.nn.Module, cfg: WatchConfig,
                 optimizer: torch.optim.Optimizer | None = None, dataloader: object = None,
                 sinks: Iterable[Sink] = (), gather: bool = True) -> None:
        self.cfg = cfg
        self.gather = gather  # cross-rank checks: only where every rank makes this watch
        self.closed = self.disabled = False
        self.auto = False  # created by the zero-code-change hook
        self.findings: list[Finding] = []
        self.loaders: list[object] = []
        self._taps: list[LoaderTap] = []
        self._pause_depth = 0
        self.step = 0
        self.optimizer: torch.optim.Optimizer | None = None
        # the one whose post-hook ended the last step
        self.stepping_optimizer: torch.optim.Optimizer | None = None
        self.join = JoinTracker()  # steps this rank sat out in DDP's Join (watch/join.py)
        self.metrics_url: str | None = None  # the Prometheus endpoint, when serving
        self._owns_cache: dict[int, bool] = {}
        self.clock = StepClock(window=deque(maxlen=cfg.every))
        self._identify()
        facts = describe(model)
        self.model, self.ddp, self.inner, self.wrapper = (facts.model, facts.ddp, facts.inner,
                                                          facts.wrapper)
        self.named_params, self.named_buffers = facts.named_params, facts.named_buffers
        self.param_ids, self.device = facts.param_ids, facts.device
        self.stream = EventStream(cfg.events_path, self.rank, cfg.warn, cfg.log)
        for s in sinks:
            self.stream.add(s)
        self.hooks = HookSet(self)
        self.monitor = hang_watchdog.acquire(self.rank, cfg, self.stream)
        if self.monitor.gpu_device is None:  # the first watcher's model names the GPU
            self.monitor.gpu_device = self.device
        self._attach_checks(optimizer, dataloader)
        self.hooks.register()
        join_hooks.install(self)
        self._start_extras()
        _WATCHERS[model] = self
        _install_excepthook()
        _install_atexit()

    # -- set-up

    def _identify(self) -> None:
        import torch.distributed as dist

        self.dist = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.dist else env_int("RANK", 0)
        self.world = dist.get_world_size() if self.dist else 1

    def _attach_checks(self, optimizer: torch.optim.Optimizer | None, dataloader: object) -> None:
        from ddpdoctor.watch import first_grad
        from ddpdoctor.watch.steps import StepCounter

        trainable = [p for _, p in self.named_params if p.requires_grad]
        self.first_grad = (first_grad.FirstGradient(self.named_params, self._on_first_grad,
                                                    self.hooks.safe, self._on_last_grad)
                           if first_grad.usable(self.wrapper, trainable) else None)
        self.steps = StepCounter(self.ddp, counts_backward=self.first_grad is not None)
        self.checks = registry.build(self.cfg)
        self.add(optimizer=optimizer, dataloader=dataloader)
        for c in self.checks:
            c.attach(self)
        self.at = registry.subscribers(self.checks)
        self.timed = self.cfg.enabled("straggler")  # per-step times are wanted
        self.exchange = Exchange(self, [c for c in self.checks
                                        if c.name in COLLECTIVE_CHECKS])
        if self.dist and self.world > 1 and self.exchange.coll and self.gather:
            self.exchange.setup()

    def _start_extras(self) -> None:
        cfg = self.cfg
        if cfg.metrics_port is not None:
            from ddpdoctor.watch.prometheus import serve_for

            serve_for(self)
        if cfg.fr_dir:
            from ddpdoctor.watch import flight_recorder

            flight_recorder.install(
                cfg.fr_dir, self.rank, cfg.fr_signal, cfg.stacks_signal,
                on_dump=lambda p: self.stream.write({"kind": "fr_dump", "path": p}, self.step))
            flight_recorder.serve_requests(cfg.fr_dir, self.rank)

    def add(self, optimizer: torch.optim.Optimizer | None = None,
            dataloader: object = None) -> None:
        """Attach an optimizer (its own step hooks) and DataLoader(s) after the fact."""
        if optimizer is not None and optimizer is not self.optimizer:
            self.optimizer = optimizer
            if self.hooks.on:
                self.hooks.hook_optimizer()
        if dataloader is None:
            return
        loaders = dataloader if isinstance(dataloader, (list, tuple)) else [dataloader]
        from ddpdoctor.watch.sampler import LoaderTap

        for ld in loaders:
            if any(ld is x for x in self.loaders) or not hasattr(ld, "_get_iterator"):
                continue
            self.loaders.append(ld)
            self._taps.append(LoaderTap(ld, self.hooks.safe(self._on_epoch),
                                        self.hooks.safe(self._on_data_wait)))

    # -- what checks read (watch/context.py)

    @property
    def sink(self) -> EventStream:
        return self.stream

    @property
    def window(self) -> deque[TimedStep]:
        return self.clock.window

    @property
    def group(self) -> ProcessGroup | None:
        return self.exchange.group

    @property
    def hosts(self) -> list[int]:
        return self.exchange.hosts

    def peer_groups(self, same_model: bool = False) -> list[list[int]]:
        return self.exchange.peer_groups(same_model)

    def solo_groups(self, ranks: list[int]) -> str | None:
        return self.exchange.solo_groups(ranks)

    def is_check_step(self, step: int) -> bool:
        return step % self.cfg.every == 0 or step in self.cfg.early_checks

    def unsubscribe(self, check: object, hook: str) -> None:
        """``check`` is done with ``hook``: the hot path stops calling it."""
        self.at[hook] = [fn for fn in self.at[hook] if getattr(fn, "__self__", None)
                         is not check]

    def emit(self, finding: Finding, step: int) -> None:
        if self.stream.finding(finding, step):
            self.findings.append(finding)

    def emit_metrics(self, records: list[StepMetrics]) -> None:
        self.stream.metrics(records)

    def note(self, name: str, value: float) -> None:
        """A value only the training loop knows (``loss``): it rides in the next metrics."""
        self.stream.note(name, value)

    # -- pausing

    @property
    def is_paused(self) -> bool:
        return self._pause_depth > 0

    def pause(self) -> None:
        """Stop watching until :meth:`resume`: every hook comes off (what runs meanwhile
        costs nothing and is not counted as a step) and the hang watchdog waits. For work
        that is not a training step and may take long: evaluation, checkpoint saving.
        Pause every rank alike (the steps they count must stay in step). Nests."""
        self._pause_depth += 1
        if self._pause_depth > 1 or self.closed:
            return
        self.hooks.remove()
        self.monitor.pause()

    def resume(self) -> None:
        """Undo one :meth:`pause`; the next step is timed from here."""
        if self._pause_depth == 0:
            return
        self._pause_depth -= 1
        if self._pause_depth or self.closed:
            return
        self.clock.restart()
        self.monitor.resume()
        self.hooks.register()

    @contextlib.contextmanager
    def paused(self) -> Iterator[Watcher]:
        """``with handle.paused(): evaluate()``: :meth:`pause`, then :meth:`resume`."""
        self.pause()
        try:
            yield self
        finally:
            self.resume()

    # -- tear-down

    def close(self) -> None:
        """Remove every hook and tap; read what the last gathers brought (2 s at most)."""
        if self.closed:
            return
        self.closed = True
        try:
            if not self.disabled:
                self.exchange.poll(deadline=time.monotonic() + 2.0)
        except Exception as e:
            log.debug("ddpdoctor: final poll failed: %s", e)
        self.final_local()
        self.hooks.remove()
        join_hooks.remove(self)
        if self._pause_depth:
            self.monitor.resume()
        for tap in self._taps:
            tap.remove()
        for c in self.checks:
            c.close(self)
        hang_watchdog.release(self.monitor)
        self.stream.close()
        _WATCHERS.pop(self.model, None)

    def final_local(self) -> None:
        """What each check saw since the last check step, said by this rank alone: no
        gather at the end (ranks end at different times, their group may be gone), so a
        NaN after the last check step is not lost when the job exits."""
        if self.disabled:
            return
        for c in self.checks:
            fn = getattr(c, "final_local", None)
            if fn is None:
                continue
            try:
                fn(self)
            except Warning:
                raise
            except Exception as e:  # the end of training must not fail here
                log.debug("ddpdoctor: %s.final_local failed: %r", c.name, e)

    def exception(self, exc: BaseException) -> None:
        """Let the checks look at an exception that is ending training (an OOM)."""
        if self.disabled or self.closed:
            return
        for c in self.checks:
            try:
                c.on_exception(self, exc)
            except Warning:
                raise
            except Exception as e:  # the user's exception matters more
                log.debug("ddpdoctor: %s.on_exception failed: %r", c.name, e)

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if exc is not None:
                self.exception(exc)
        finally:
            self.close()

    def __repr__(self) -> str:
        return (f"<ddpdoctor.watch {self.wrapper} rank={self.rank} step={self.step} "
                f"checks={[c.name for c in self.checks]} findings={len(self.findings)}>")


def _install_atexit() -> None:
    """Once per process: at a normal exit, the watchers no one closed (the zero-code
    ones) are closed: they read the gathers still in flight and say what they saw since
    their last check step."""
    if _exit_hook:
        return
    import atexit

    def at_exit() -> None:
        for w in list(_WATCHERS.values()):
            if not w.closed:
                try:
                    w.close()
                except Exception:  # exiting anyway
                    pass
        _WATCHERS.clear()
        # The watch's gloo groups (and the user's, through the model a watcher held) must
        # be freed while Python still runs: a gloo thread that drops the last reference to
        # a Python tensor during interpreter shutdown aborts a healthy rank with
        # "terminate called without an active exception" (pytorch/pytorch#190489).
        release_groups()
        gc.collect()

    atexit.register(at_exit)
    _exit_hook.append(at_exit)


_exit_hook: list[Callable[[], None]] = []


def _install_excepthook() -> None:
    """Once per process: an uncaught exception is shown to the live watchers first (an
    OOM gets its evidence while the memory is still there), then to the previous hook."""
    import sys

    if getattr(sys.excepthook, "_ddpdoctor", False):
        return
    previous = sys.excepthook

    def hook(exc_type: type[BaseException], exc: BaseException,
             tb: TracebackType | None) -> None:
        for w in list(_WATCHERS.values()):
            try:
                w.exception(exc)
            except Exception:  # the user's traceback comes next
                pass
        previous(exc_type, exc, tb)

    hook._ddpdoctor = True  # type: ignore[attr-defined]
    sys.excepthook = hook
