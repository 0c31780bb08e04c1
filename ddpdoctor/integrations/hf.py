"""Hugging Face Trainer: ``DDPDoctorCallback.attach(trainer)`` before ``trainer.train()``.

At ``on_train_begin`` the callback watches ``trainer.model_wrapped`` (the DDP/FSDP model
accelerate prepared) with the trainer's optimizer (the torch one inside accelerate's
wrapper: its step hooks fire on real steps only, not on accumulation micro-steps) and the
train DataLoader. Findings are logged at once through ``trainer.log`` (so every
``report_to`` integration gets them: TensorBoard, W&B, MLflow...; and
``trainer.state.log_history``) under ``ddpdoctor/finding/<ID>/rank<R>``; metrics
(``ddpdoctor/rank<R>/<metric>``) ride on the steps the trainer logs anyway
(``logging_steps``). A finding prints once on the ``transformers`` logger with its rank
and playbook. Importing ddpdoctor does not import this module (nor transformers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transformers import TrainerCallback
from transformers.utils import logging as hf_logging

from ddpdoctor.integrations.common import scalars, watch_with_sinks

if TYPE_CHECKING:
    import torch
    from transformers import Trainer, TrainerControl, TrainerState, TrainingArguments
    from typing_extensions import Unpack

    from ddpdoctor.integrations.common import BufferSink, Watcher, WatchSettings

console = hf_logging.get_logger("transformers.ddpdoctor")


class DDPDoctorCallback(TrainerCallback):
    """``settings``: any ``ddpdoctor.watch()`` setting (``every=``, ``checks=``...)."""

    def __init__(self, trainer: Trainer | None = None, **settings: Unpack[WatchSettings]) -> None:
        self.trainer = trainer
        self.settings: WatchSettings = settings
        self.handle: Watcher | None = None
        self.buffer: BufferSink | None = None

    @classmethod
    def attach(cls, trainer: Trainer, **settings: Unpack[WatchSettings]) -> DDPDoctorCallback:
        """Add a callback bound to ``trainer`` (its logging goes through ``trainer.log``)."""
        cb = cls(trainer, **settings)
        trainer.add_callback(cb)
        return cb

    def on_train_begin(self, args: TrainingArguments, state: TrainerState,
                       control: TrainerControl, model: torch.nn.Module | None = None,
                       optimizer: object = None, train_dataloader: object = None,
                       **kwargs: object) -> None:
        target = getattr(self.trainer, "model_wrapped", None) or model
        self.handle, self.buffer = watch_with_sinks(target, optimizer, train_dataloader,
                                                    console, self.settings)

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, float] | None = None, **kwargs: object) -> None:
        if self.handle is not None and logs and isinstance(logs.get("loss"), (int, float)):
            self.handle.note("loss", logs["loss"])

    def on_step_end(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, **kwargs: object) -> None:
        if self.handle is not None:
            # DefaultFlowCallback ran first: should_log says whether this step logs
            self._flush(metrics=bool(control.should_log), control=control)

    def on_train_end(self, args: TrainingArguments, state: TrainerState,
                     control: TrainerControl, **kwargs: object) -> None:
        if self.handle is None:
            return
        self.handle.close()  # reads the last gathers: their findings flush below
        self._flush(metrics=True)
        self.handle = None

    def _flush(self, metrics: bool, control: TrainerControl | None = None) -> None:
        if self.buffer is None:  # never: it is made with the handle
            return
        values = scalars(*self.buffer.drain(with_metrics=metrics))
        if not values or self.trainer is None:
            return
        # trainer.log clears control.should_log (CallbackHandler.on_log): on the rank that
        # logs a finding, the trainer would then skip its own logging step and the loss
        # gather in it, while the other ranks run that collective: a desync we would have
        # caused. The flags are put back as they were; training sees no difference.
        controls = [c for c in {id(c): c for c in (control, self.trainer.control)}.values()
                    if c is not None]
        saved = [dict(vars(c)) for c in controls]
        try:
            self.trainer.log(values)
        finally:
            for c, flags in zip(controls, saved):
                vars(c).update(flags)
