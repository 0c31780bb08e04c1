"""PyTorch Lightning: ``Trainer(callbacks=[DDPDoctorCallback()])``.

At ``on_train_start`` the callback watches the strategy's (DDP-wrapped) model with the
trainer's first optimizer and its train DataLoaders; validation is paused (it is no
training step). After each training batch, findings and metrics go to every logger the
trainer has (``trainer.loggers``: CSV, TensorBoard, W&B, MLflow...) under
``ddpdoctor/finding/<ID>/rank<R>`` and ``ddpdoctor/rank<R>/<metric>``, and a finding is
printed once on the ``lightning.pytorch`` logger with its rank and playbook.
Importing ddpdoctor does not import this module (nor lightning).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from lightning.pytorch.callbacks import Callback

from ddpdoctor.integrations.common import scalars, watch_with_sinks

if TYPE_CHECKING:
    from lightning.pytorch import LightningModule, Trainer
    from typing_extensions import Unpack

    from ddpdoctor.integrations.common import BufferSink, Watcher, WatchSettings

console = logging.getLogger("lightning.pytorch")


class DDPDoctorCallback(Callback):
    """``settings``: any ``ddpdoctor.watch()`` setting (``every=``, ``checks=``...)."""

    def __init__(self, **settings: Unpack[WatchSettings]) -> None:
        self.settings: WatchSettings = settings
        self.handle: Watcher | None = None
        self.buffer: BufferSink | None = None
        self._paused = False

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        optimizers = trainer.optimizers
        self.handle, self.buffer = watch_with_sinks(
            trainer.strategy.model, optimizers[0] if optimizers else None,
            trainer.train_dataloader, console, self.settings)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule,
                           outputs: object, batch: object, batch_idx: int) -> None:
        if self.handle is None:
            return
        every = max(1, getattr(trainer, "log_every_n_steps", 50) or 1)
        logs = trainer.global_step % every == 0
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if logs and hasattr(loss, "detach"):
            # read on the steps Lightning logs only: on a GPU reading it waits for the step
            self.handle.note("loss", float(loss.detach()))
        self._flush(trainer, metrics=logs)

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.handle is not None and not self._paused:
            self.handle.pause()
            self._paused = True

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.handle is not None and self._paused:
            self.handle.resume()
            self._paused = False

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._close(trainer)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule,
                     exception: BaseException) -> None:
        if self.handle is not None:
            self.handle.exception(exception)
        self._close(trainer)

    def _close(self, trainer: Trainer) -> None:
        if self.handle is None:
            return
        self.handle.close()  # reads the last gathers: their findings flush below
        self._flush(trainer)
        for lg in trainer.loggers:
            lg.save()
        self.handle = None

    def _flush(self, trainer: Trainer, metrics: bool = True) -> None:
        """Findings at once; metrics on the steps Lightning logs (``log_every_n_steps``)."""
        if self.buffer is None:  # never: it is made with the handle
            return
        values = scalars(*self.buffer.drain(with_metrics=metrics))
        if values:
            for lg in trainer.loggers:
                lg.log_metrics(values, step=trainer.global_step)
