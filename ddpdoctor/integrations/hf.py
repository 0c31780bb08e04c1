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

from typing import Any

from transformers import TrainerCallback
from transformers.utils import logging as hf_logging

from ddpdoctor.integrations.common import scalars, watch_with_sinks

console = hf_logging.get_logger("transformers.ddpdoctor")


class DDPDoctorCallback(TrainerCallback):
    """``settings``: any ``ddpdoctor.watch()`` setting (``every=``, ``checks=``...)."""

    def __init__(self, trainer: Any = None, **settings: Any) -> None:
        self.trainer = trainer
        self.settings = settings
        self.handle: Any = None
        self.buffer: Any = None

    @classmethod
    def attach(cls, trainer: Any, **settings: Any) -> DDPDoctorCallback:
        """Add a callback bound to ``trainer`` (its logging goes through ``trainer.log``)."""
        cb = cls(trainer, **settings)
        trainer.add_callback(cb)
        return cb

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       optimizer: Any = None, train_dataloader: Any = None,
                       **kwargs: Any) -> None:
        target = getattr(self.trainer, "model_wrapped", None) or model
        self.handle, self.buffer = watch_with_sinks(target, optimizer, train_dataloader,
                                                    console, self.settings)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None,
               **kwargs: Any) -> None:
        if self.handle is not None and logs and isinstance(logs.get("loss"), (int, float)):
            self.handle.note("loss", logs["loss"])

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.handle is not None:
            # DefaultFlowCallback ran first: should_log says whether this step logs
            self._flush(metrics=bool(control.should_log), control=control)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.handle is None:
            return
        self.handle.close()  # reads the last gathers: their findings flush below
        self._flush(metrics=True)
        self.handle = None

    def _flush(self, metrics: bool, control: Any = None) -> None:
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
