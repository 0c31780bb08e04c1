"""accelerate: ``handle = watch(accelerator, model, optimizer, dataloader)`` after
``accelerator.prepare(...)``.

The prepared (DDP/FSDP-wrapped) model is watched with the torch optimizer inside
accelerate's ``AcceleratedOptimizer`` (its step hooks fire on real steps, not on the
micro-steps ``accelerator.accumulate`` skips) and the DataLoader inside the
``DataLoaderShard``. After each optimizer step, findings and metrics go to
``accelerator.log`` (every tracker the user configured with ``log_with=``: TensorBoard,
W&B, MLflow, Comet, a custom ``GeneralTracker``; accelerate logs on the main process)
under ``ddpdoctor/finding/<ID>/rank<R>`` and ``ddpdoctor/rank<R>/<metric>``; a finding
prints once on accelerate's logger with its rank and playbook. ``handle.close()`` at the
end (or ``with watch(...):``). Importing ddpdoctor does not import this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from accelerate.logging import get_logger  # type: ignore[import-untyped]  # ships no hints

from ddpdoctor.integrations.common import Sink, scalars, torch_optimizer, watch_with_sinks

if TYPE_CHECKING:
    import torch
    from torch.utils.hooks import RemovableHandle
    from typing_extensions import Unpack

    from ddpdoctor.integrations.common import BufferSink, Watcher, WatchSettings


class Tracking(Protocol):
    """What is asked of the ``Accelerator`` (accelerate ships no type hints)."""

    def log(self, values: dict[str, float], step: int | None = None) -> None: ...


class _Console:
    """accelerate's logger prints on the main process only unless told otherwise; a
    finding belongs to the rank that saw it."""

    def __init__(self) -> None:
        self.adapter = get_logger("ddpdoctor")

    def log(self, level: int, text: str) -> None:
        self.adapter.log(level, text, main_process_only=False)


def watch(accelerator: Tracking, model: torch.nn.Module, optimizer: object = None,
          dataloader: object = None, log_every: int = 50,
          **settings: Unpack[WatchSettings]) -> Watcher:
    """Watch a prepared model. ``log_every``: optimizer steps between metric logs
    (findings are logged at once). ``settings``: any ``ddpdoctor.watch()`` setting."""
    handle, buffer = watch_with_sinks(model, optimizer, dataloader, _Console(), settings)
    opt = torch_optimizer(optimizer) or handle.optimizer
    if opt is not None:
        flusher = _Flusher(accelerator, handle, buffer, log_every)
        hook = opt.register_step_post_hook(flusher)
        handle.stream.add(_Unhook(hook, flusher))
    return handle


class _Flusher:
    def __init__(self, accelerator: Tracking, handle: Watcher, buffer: BufferSink,
                 log_every: int) -> None:
        self.accelerator, self.handle, self.buffer = accelerator, handle, buffer
        self.log_every = max(1, log_every)

    def __call__(self, *_: object) -> None:
        self.flush(final=False)

    def flush(self, final: bool) -> None:
        try:
            step = self.handle.step
            values = scalars(*self.buffer.drain(final or step % self.log_every == 0))
            if values:
                self.accelerator.log(values, step=step)
        except Exception:  # a tracker's failure must not stop training
            pass


class _Unhook(Sink):
    """A sink whose only job: at close, log what is left and take the step hook off."""

    def __init__(self, hook: RemovableHandle, flusher: _Flusher) -> None:
        self.hook, self.flusher = hook, flusher

    def finding(self, *_: object) -> None:
        pass

    def event(self, *_: object) -> None:
        pass

    def metrics(self, *_: object) -> None:
        pass

    def close(self) -> None:
        self.hook.remove()
        self.flusher.flush(final=True)
