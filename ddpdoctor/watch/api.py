"""``ddpdoctor.watch(model, optimizer=None, dataloader=None, ...)``: in-training checks.

The watcher only reads: a tensor hook on the parameter whose gradient comes first in
backward (``first_grad``: before any all-reduce), optimizer step pre/post hooks (the
optimizer's own, or the global ones bound to the first optimizer that steps this model's
parameters), instance-level DataLoader taps, and module forward hooks, the last only on
the steps that need them where the first gradient is seen (each costs ~20 us a step on a
busy CPU), on every step for FSDP and tensor-parallel models.
The step boundary is the optimizer post-hook from the first step (watch/steps.py: a
forward never is, unless no optimizer steps at all).
Cross-rank checks pack their few values into one float64 all_gather every ``every`` steps,
issued at the step boundary on every rank in the same order, asynchronously on a gloo group
of its own created once at attach (the training group's sequence numbers, streams and
Flight Recorder entries stay untouched); the result is read at a later boundary, so the
training thread never waits for it. ``pause()`` takes every hook off until ``resume()``
(evaluation, checkpoint saving: not steps, and not stalls). Any failure inside the watcher
disables it and is logged; it never raises into the training loop (except a
DDPDoctorWarning turned into an error on purpose with ``-W error``).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
import weakref
import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

from ddpdoctor.findings import Finding
from ddpdoctor.watch import hang_watchdog
from ddpdoctor.watch.base import WatchCheck
from ddpdoctor.watch.config import COLLECTIVE_CHECKS, WatchConfig, from_env
from ddpdoctor.watch.events import EventSink

log = logging.getLogger("ddpdoctor.watch")
_WATCHERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_GROUPS: dict[str, Any] = {}  # the watch's gloo groups, one of each per process
_NAME_NOISE = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def _check_classes() -> dict[str, type[WatchCheck]]:
    from ddpdoctor.watch.desync import DesyncCheck
    from ddpdoctor.watch.device import DeviceCheck
    from ddpdoctor.watch.links import LinksCheck
    from ddpdoctor.watch.memory import MemoryCheck
    from ddpdoctor.watch.nonfinite import NonfiniteCheck
    from ddpdoctor.watch.sampler import SamplerCheck
    from ddpdoctor.watch.skipped_steps import SkippedStepsCheck
    from ddpdoctor.watch.straggler import StragglerCheck
    from ddpdoctor.watch.unused import UnusedCheck

    return {"unused": UnusedCheck, "nonfinite": NonfiniteCheck, "desync": DesyncCheck,
            "sampler": SamplerCheck, "straggler": StragglerCheck, "memory": MemoryCheck,
            "device": DeviceCheck, "links": LinksCheck, "skipped": SkippedStepsCheck}


def clean_name(name: str) -> str:
    for noise in _NAME_NOISE:
        name = name.replace(noise, "")
    return name


def watch(model: Any, optimizer: Any = None, dataloader: Any = None, every: int | None = None,
          checks: Iterable[str] | str | None = None, events_path: str | None = None,
          **settings: Any) -> Watcher:
    """Watch ``model`` (plain, DDP, FSDP/FSDP2, with any optimizer incl. ZeRO) in training.

    Returns the handle (also a context manager); ``handle.close()`` removes every hook.
    Watching a model twice returns the first handle (adding the optimizer / loader given).
    Settings: see :class:`ddpdoctor.watch.config.WatchConfig`; env overrides apply.
    """
    existing = _WATCHERS.get(model)
    if existing is not None and not existing.closed:
        existing.add(optimizer=optimizer, dataloader=dataloader)
        return existing
    cfg = from_env(every=every, checks=checks, events_path=events_path, **settings)
    return Watcher(model, cfg, optimizer, dataloader)


class Watcher:
    def __init__(self, model: Any, cfg: WatchConfig, optimizer: Any = None,
                 dataloader: Any = None) -> None:
        import torch
        import torch.distributed as dist

        self.model, self.cfg = model, cfg
        self.closed = False
        self.auto = False  # created by the zero-code-change hook
        self.disabled = False
        self.findings: list[Finding] = []
        self._opt_hooks: list[Any] = []
        self._hooks_on = False  # False until attached, and while paused
        self._pause_depth = 0
        self._module_hooks: list[Any] = []
        self._taps: list[Any] = []
        self.loaders: list[Any] = []
        self.pending: deque = deque()
        self.window: deque = deque(maxlen=cfg.every)
        self.step = 0
        self.in_step = False
        self.data_s = self.fwd_s = 0.0
        self.t_fwd = 0.0
        self.t_boundary = time.perf_counter()
        self.optimizer: Any = None
        self._owns_cache: dict[int, bool] = {}

        self.dist = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.dist else _env_int("RANK", 0)
        self.world = dist.get_world_size() if self.dist else 1
        self.sink = EventSink(cfg.events_path, self.rank, cfg.warn, cfg.log)

        from torch.nn.parallel import DistributedDataParallel

        self.ddp = model if isinstance(model, DistributedDataParallel) else None
        self.inner = model.module if self.ddp is not None else model
        self.wrapper = _wrapper_kind(model)
        self.named_params = [(clean_name(n), p) for n, p in self.inner.named_parameters()]
        self.named_buffers = [(clean_name(n), b) for n, b in self.inner.named_buffers()]
        self.param_ids = {id(p) for _, p in self.named_params}
        first = next((p for _, p in self.named_params), None)
        self.device = _local(first).device if first is not None else torch.device("cpu")

        # made once: hooks that come and go (module hooks, a pause) reuse them
        self._hook_fns = {name: self._safe(getattr(self, f"_on_{name}")) for name in
                          ("pre_step", "post_step", "forward_pre", "inner_pre", "inner_out")}
        self.monitor = hang_watchdog.acquire(self.rank, cfg, self.sink)
        from ddpdoctor.watch import first_grad

        trainable = [p for _, p in self.named_params if p.requires_grad]
        self.first_grad = (first_grad.FirstGradient(self.named_params, self._on_first_grad,
                                                    self._safe)
                           if first_grad.usable(self.wrapper, trainable) else None)
        from ddpdoctor.watch.steps import StepCounter

        self.steps = StepCounter(self.ddp, counts_backward=self.first_grad is not None)
        classes = _check_classes()
        self.checks: list[WatchCheck] = [classes[n]() for n in classes if cfg.enabled(n)]
        self.add(optimizer=optimizer, dataloader=dataloader)
        for c in self.checks:
            c.attach(self)
        # Per hook point, only the checks that act there: the hooks run every step.
        self._at = {hook: [getattr(c, hook) for c in self.checks
                           if getattr(type(c), hook) is not getattr(WatchCheck, hook)
                           and hook not in c.skip]
                    for hook in ("forward_pre", "forward_out", "first_grad", "before_check",
                                 "step_end", "at_check")}
        self.group = None
        self.meta: list[tuple[int, int]] = [(0, 0)]
        self.hosts: list[int] = [0]  # per rank, _host_id(): hostname and network namespace
        self.coll = [c for c in self.checks if c.name in COLLECTIVE_CHECKS]
        self.timed = cfg.enabled("straggler")  # per-step times are wanted
        self._hooks_span = -1  # steps before each check step that run the module hooks
        self._next_check_step = 0
        if self.dist and self.world > 1 and self.coll:
            self._setup_group(dist, torch)
        self._register_hooks()
        if cfg.fr_dir:
            from ddpdoctor.watch import flight_recorder

            flight_recorder.install(
                cfg.fr_dir, self.rank, cfg.fr_signal, cfg.stacks_signal,
                on_dump=lambda p: self.sink.write({"kind": "fr_dump", "path": p}, self.step))
            flight_recorder.serve_requests(cfg.fr_dir, self.rank)
        _WATCHERS[model] = self
        _install_excepthook()

    # -- set-up

    def add(self, optimizer: Any = None, dataloader: Any = None) -> None:
        """Attach an optimizer (its own step hooks) and DataLoader(s) after the fact."""
        if optimizer is not None and optimizer is not self.optimizer:
            self.optimizer = optimizer
            if self._hooks_on:
                self._hook_optimizer()
        if dataloader is None:
            return
        loaders = dataloader if isinstance(dataloader, (list, tuple)) else [dataloader]
        from ddpdoctor.watch.sampler import LoaderTap

        for ld in loaders:
            if any(ld is x for x in self.loaders) or not hasattr(ld, "_get_iterator"):
                continue
            self.loaders.append(ld)
            self._taps.append(LoaderTap(ld, self._safe(self._on_epoch),
                                        self._safe(self._on_data_wait)))

    def _setup_group(self, dist: Any, torch: Any) -> None:
        try:
            group = self._make_group("gather")
            dp = _dp_ranks(self.model, self.ddp, dist, self.world)
            desync = next((c for c in self.coll if c.name == "desync"), None)
            names = "\n".join(f"{n}:{tuple(t.shape)}" for n, t in getattr(desync, "tensors", []))
            host = _host_id()
            mine = torch.tensor([min(dp), zlib.crc32(names.encode()),
                                 desync.width if desync else 0, self.width_without_desync(),
                                 host], dtype=torch.float64)
            out = torch.empty(self.world * 5, dtype=torch.float64)
            _all_gather(dist)(out, mine, group=group)
            rows = out.view(self.world, 5).tolist()
            if len({int(r[3]) for r in rows}) != 1:
                log.warning("ddpdoctor: ranks disagree on watch settings; cross-rank checks off")
                return
            if desync is not None:
                desync.width = max(int(r[2]) for r in rows)
            self.meta = [(int(r[0]), int(r[1])) for r in rows]
            self.hosts = [int(r[4]) for r in rows]
            self.group = group
        except Exception as e:  # noqa: BLE001 - local checks still work
            log.warning("ddpdoctor: no watch process group (%s); cross-rank checks off", e)
            return
        for c in self.coll:
            c.group_ready(self, self._make_group)

    def _make_group(self, name: str) -> Any:
        # new_group is collective: every rank makes the same groups in the same order,
        # which holds because the ranks just agreed on the settings.
        if name not in _GROUPS:
            import torch.distributed as dist

            _GROUPS[name] = dist.new_group(
                backend="gloo", timeout=timedelta(seconds=self.cfg.collective_timeout_s))
        return _GROUPS[name]

    def width_without_desync(self) -> int:
        return sum(c.width for c in self.coll if c.name != "desync")

    def _register_hooks(self) -> None:
        self._hooks_on = True
        self._hook_optimizer()
        if self.first_grad is not None:
            self.first_grad.restore()
        self._set_module_hooks(self._module_hooks_needed(self.step + 1))

    def _remove_hooks(self) -> None:
        self._hooks_on = False
        for h in self._opt_hooks:
            h.remove()
        self._opt_hooks = []
        self._set_module_hooks(False)
        if self.first_grad is not None:
            self.first_grad.remove()

    def _hook_optimizer(self) -> None:
        """The step hooks: the optimizer's own, or, while none was given, the global ones
        (bound to the first optimizer that steps this model). Never both: each step would
        count twice."""
        for h in self._opt_hooks:
            h.remove()
        pre, post = self._hook_fns["pre_step"], self._hook_fns["post_step"]
        if self.optimizer is not None:
            self._opt_hooks = [self.optimizer.register_step_pre_hook(pre),
                               self.optimizer.register_step_post_hook(post)]
            return
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self._opt_hooks = [register_optimizer_step_pre_hook(pre),
                           register_optimizer_step_post_hook(post)]

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
        self._remove_hooks()
        self.monitor.pause()

    def resume(self) -> None:
        """Undo one :meth:`pause`; the next step is timed from here."""
        if self._pause_depth == 0:
            return
        self._pause_depth -= 1
        if self._pause_depth or self.closed:
            return
        self.in_step = False
        self.data_s = self.fwd_s = 0.0
        self.t_boundary = time.perf_counter()
        self.monitor.resume()
        self._register_hooks()

    @contextlib.contextmanager
    def paused(self) -> Iterator[Watcher]:
        """``with handle.paused(): evaluate()``: :meth:`pause`, then :meth:`resume`."""
        self.pause()
        try:
            yield self
        finally:
            self.resume()

    def _set_module_hooks(self, on: bool) -> None:
        if on == bool(self._module_hooks):
            return
        if not on:
            for h in self._module_hooks:
                h.remove()
            self._module_hooks = []
            return
        outer, inner = self.model, self.inner
        self._module_hooks.append(outer.register_forward_pre_hook(
            self._hook_fns["forward_pre"], prepend=True, with_kwargs=True))
        if inner is not outer:
            self._module_hooks.append(inner.register_forward_pre_hook(
                self._hook_fns["inner_pre"], prepend=True))
        self._module_hooks.append(inner.register_forward_hook(self._hook_fns["inner_out"]))

    def _module_hooks_needed(self, step: int) -> bool:
        """Whether step ``step`` needs the module forward hooks (see base.py). Runs at
        every boundary: integer compares once the model is learnt."""
        if self._hooks_span < 0:
            if self.first_grad is None or not self.first_grad.settled or self._at["forward_out"]:
                return True
            # the straggler check compares the forward times of the last steps before a
            # check step; forward_pre checks (the sampler) look at a check step's input
            self._hooks_span = max(self.cfg.straggler_samples if self.timed else 0,
                                   1 if self._at["forward_pre"] else 0)
        if step > self._next_check_step:
            self._next_check_step = self._next_check(step)
        if self._next_check_step - step < self._hooks_span:
            return True
        # until an optimizer steps, forwards are counted (and may become the boundary)
        return self.optimizer is None and self._no_opt()

    def _next_check(self, step: int) -> int:
        """The first check step at or after ``step``."""
        regular = -(-step // self.cfg.every) * self.cfg.every
        return min([regular] + [s for s in self.cfg.early_checks if s >= step])

    # -- helpers for checks

    def is_check_step(self, step: int) -> bool:
        return step % self.cfg.every == 0 or step in self.cfg.early_checks

    def peer_groups(self, same_model: bool = False) -> list[list[int]]:
        """Ranks grouped by data-parallel group (and identical model, if asked)."""
        groups: dict[tuple, list[int]] = {}
        for r, (dp, crc) in enumerate(self.meta):
            groups.setdefault((dp, crc) if same_model else (dp,), []).append(r)
        return sorted(groups.values())

    def unsubscribe(self, check: WatchCheck, hook: str) -> None:
        """``check`` is done with ``hook``: the hot path stops calling it."""
        self._at[hook] = [fn for fn in self._at[hook] if getattr(fn, "__self__", None)
                          is not check]

    def emit(self, finding: Finding, step: int) -> None:
        if self.sink.finding(finding, step):
            self.findings.append(finding)

    # -- hooks (each wrapped by _safe)

    def _safe(self, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.disabled:
                return None
            try:
                fn(*args, **kwargs)
            except Warning:
                raise  # -W error::DDPDoctorWarning: the user asked for it
            except Exception as e:  # noqa: BLE001 - never break training
                self.disabled = True
                log.warning("ddpdoctor.watch disabled after an internal error: %r", e,
                            exc_info=log.isEnabledFor(logging.DEBUG))
            return None
        return wrapper

    def _on_forward_pre(self, module: Any, args: tuple, kwargs: dict) -> None:
        import torch

        if not torch.is_grad_enabled():
            return
        now = time.perf_counter()
        optimizer_seen = self.optimizer is not None or not self._no_opt()
        if self.steps.forward_ends_step(optimizer_seen) and self.in_step:
            self._boundary(now)  # no optimizer ever stepped: a forward starts the next step
        self.steps.on_forward()
        if not self.in_step:
            self.in_step = True
            if not self.loaders:
                self.data_s += now - self.t_boundary
        self.monitor.progress(self.step, "forward")
        for fn in self._at["forward_pre"]:
            fn(self, args, kwargs)
        if self.inner is self.model:
            self.t_fwd = time.perf_counter()

    def _no_opt(self) -> bool:
        return not any(self._owns_cache.values())

    def _on_inner_pre(self, module: Any, args: tuple) -> None:
        self.t_fwd = time.perf_counter()

    def _on_inner_out(self, module: Any, args: tuple, output: Any) -> None:
        import torch

        if not torch.is_grad_enabled():
            return
        self.fwd_s += time.perf_counter() - self.t_fwd
        for fn in self._at["forward_out"]:
            fn(self, output)
        self.monitor.progress(self.step, "backward")

    def _owns(self, opt: Any) -> bool:
        if opt is self.optimizer:
            return True
        if self.optimizer is not None:
            return False
        key = id(opt)
        if key not in self._owns_cache:
            bound = any(self._owns_cache.values())
            self._owns_cache[key] = not bound and any(
                id(p) in self.param_ids for g in opt.param_groups for p in g["params"])
        return self._owns_cache[key]

    def _on_first_grad(self, grad: Any) -> None:
        self.steps.on_backward()
        self.monitor.progress(self.step, "backward")
        for fn in self._at["first_grad"]:
            fn(self, grad)

    def _on_pre_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        if not self._owns(opt):
            return
        self.monitor.progress(self.step, "optimizer")
        if self._at["before_check"] and self.is_check_step(self.step + 1):
            for fn in self._at["before_check"]:
                fn(self, self.step + 1)

    def _on_post_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        if self._owns(opt):
            self._boundary(time.perf_counter())

    def _on_epoch(self, loader: Any) -> None:
        for c in self.checks:
            if hasattr(c, "on_epoch"):
                c.on_epoch(self, loader)

    def _on_data_wait(self, seconds: float) -> None:
        self.data_s += seconds

    # -- the step boundary

    def _boundary(self, now: float) -> None:
        self.step += 1
        step = self.step
        self.steps.end_step()
        step_s = now - self.t_boundary
        timed = bool(self._module_hooks)  # its forward ran under the module hooks
        if timed:
            self.window.append((step, step_s, self.data_s, self.fwd_s))
        self.monitor.boundary(step, step_s, self.data_s, self.fwd_s, timed)
        self.data_s = self.fwd_s = 0.0
        self.in_step = False
        self.t_boundary = now
        for fn in self._at["step_end"]:
            fn(self, step)
        if self.coll and self.is_check_step(step):
            for fn in self._at["at_check"]:
                fn(self, step)
            if self.group is not None:
                self._gather(step)
            elif self.world == 1:
                self._analyze(step, self._pack(step).view(1, -1))  # one process: no gather
        if self.pending:
            self._poll()
        if self.first_grad is not None and self.first_grad.settle():
            self._set_module_hooks(self._module_hooks_needed(step + 1))
        self.t_boundary = time.perf_counter()  # the watcher's own time is not data wait

    def _gather(self, step: int) -> None:
        import torch
        import torch.distributed as dist

        inp = self._pack(step)
        out = torch.empty(self.world * inp.numel(), dtype=torch.float64)
        work = _all_gather(dist)(out, inp, group=self.group, async_op=True)
        self.pending.append((step, work, out, inp))

    def _pack(self, step: int) -> Any:
        import torch

        parts = [torch.tensor([float(step)], dtype=torch.float64)]
        for c in self.coll:
            t = c.pack(self, step)
            parts.append(t if t is not None else torch.zeros(c.width, dtype=torch.float64))
        return torch.cat(parts)

    def _poll(self, deadline: float | None = None) -> None:
        while self.pending:
            step, work, out, _ = self.pending[0]
            if not work.is_completed():
                if deadline is None or time.monotonic() > deadline:
                    return
                time.sleep(0.01)
                continue
            self.pending.popleft()
            try:
                work.wait()
            except Exception as e:  # noqa: BLE001 - a peer died: stop cross-rank checks
                log.warning("ddpdoctor: watch all_gather failed (%s); cross-rank checks off", e)
                self.group, self.pending = None, deque()
                return
            if self.rank == 0:
                self._analyze(step, out.view(self.world, -1))

    def _analyze(self, step: int, rows: Any) -> None:
        if {int(s) for s in rows[:, 0].tolist()} != {step}:
            log.warning("ddpdoctor: ranks out of step in the watch gather; checks off")
            self.group = None
            return
        off = 1
        for c in self.coll:
            for f in c.analyze(self, step, rows[:, off:off + c.width]):
                self.emit(f, int(f.evidence.get("step", step)))
            off += c.width

    # -- tear-down

    def close(self) -> None:
        """Remove every hook and tap; read what the last gathers brought (2 s at most)."""
        if self.closed:
            return
        self.closed = True
        try:
            if not self.disabled:
                self._poll(deadline=time.monotonic() + 2.0)
        except Exception as e:  # noqa: BLE001
            log.debug("ddpdoctor: final poll failed: %s", e)
        self._remove_hooks()
        if self._pause_depth:
            self.monitor.resume()
        for tap in self._taps:
            tap.remove()
        for c in self.checks:
            c.close(self)
        hang_watchdog.release(self.monitor)
        _WATCHERS.pop(self.model, None)

    def exception(self, exc: BaseException) -> None:
        """Let the checks look at an exception that is ending training (an OOM)."""
        if self.disabled or self.closed:
            return
        for c in self.checks:
            try:
                c.on_exception(self, exc)
            except Warning:
                raise
            except Exception as e:  # noqa: BLE001 - the user's exception matters more
                log.debug("ddpdoctor: %s.on_exception failed: %r", c.name, e)

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc is not None:
                self.exception(exc)
        finally:
            self.close()

    def __repr__(self) -> str:
        return (f"<ddpdoctor.watch {self.wrapper} rank={self.rank} step={self.step} "
                f"checks={[c.name for c in self.checks]} findings={len(self.findings)}>")


def _host_id() -> int:
    """Ranks with the same id share a host and a network namespace (their links are
    loopback). A hostname alone is not enough: containers and namespaces share one."""
    import os

    try:
        netns = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        netns = 0
    return zlib.crc32(f"{socket.gethostname()}/{netns}".encode())


def _install_excepthook() -> None:
    """Once per process: an uncaught exception is shown to the live watchers first (an
    OOM gets its evidence while the memory is still there), then to the previous hook."""
    import sys

    if getattr(sys.excepthook, "_ddpdoctor", False):
        return
    previous = sys.excepthook

    def hook(exc_type: Any, exc: BaseException, tb: Any) -> None:
        for w in list(_WATCHERS.values()):
            try:
                w.exception(exc)
            except Exception:  # noqa: BLE001, S110 - the user's traceback comes next
                pass
        previous(exc_type, exc, tb)

    hook._ddpdoctor = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def _all_gather(dist: Any) -> Any:
    # all_gather_into_tensor is deprecated (a FutureWarning per call) where the new name
    # exists; torch < 2.10 only has the old one.
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _env_int(name: str, default: int) -> int:
    import os

    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _local(t: Any) -> Any:
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def _wrapper_kind(model: Any) -> str:
    names = {type(m).__name__ for m in [model]} | {c.__name__ for c in type(model).__mro__}
    if "DistributedDataParallel" in names:
        return "ddp"
    if "FSDPModule" in names:
        return "fsdp2"
    if "FullyShardedDataParallel" in names:
        return "fsdp1"
    return "module"


def _dp_ranks(model: Any, ddp: Any, dist: Any, world: int) -> list[int]:
    """Global ranks of this rank's data-parallel group (the world when unknown)."""
    try:
        if ddp is not None and getattr(ddp, "process_group", None) is not None:
            return list(dist.get_process_group_ranks(ddp.process_group))
        for m in model.modules():
            get_state = getattr(m, "_get_fsdp_state", None)
            if get_state is None:
                continue
            pgroup = getattr(get_state(), "_fsdp_param_group", None)
            if pgroup is None:
                continue
            info = pgroup.mesh_info
            ranks = set(dist.get_process_group_ranks(info.shard_process_group))
            rep = getattr(info, "replicate_process_group", None)
            if rep is not None:
                ranks |= set(dist.get_process_group_ranks(rep))
            return sorted(ranks)
    except Exception:  # noqa: BLE001 - private attributes move between releases
        pass
    return list(range(world))
