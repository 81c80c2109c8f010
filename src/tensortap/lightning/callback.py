"""``TensortapCallback``: the PyTorch hook inside a Lightning ``Trainer``.

::

    from tensortap.lightning import TensortapCallback

    trainer = lightning.pytorch.Trainer(max_epochs=3, callbacks=[TensortapCallback()])

- Steps are optimizer steps (``trainer.global_step``; ``accumulate_grad_batches`` counted once),
  also in a fit resumed from a checkpoint (``ckpt_path=``) into the same trial: a new session,
  whose TRAIN steps continue from the restored ``global_step``.
  The TRAIN mode is the training batches, EVAL the validation ones (one EVAL step per
  validation run, holding its metrics; the sanity check before training is not kept).
- ``loss`` is the step's loss as ``training_step`` returned it (summed over accumulated
  batches, which Lightning divides), saved whatever the logger does.
- Gradients are saved in ``on_before_optimizer_step``: after the backward pass, the
  accumulation and Lightning's unscaling, before the update (Lightning runs the backward
  pass inside ``optimizer.step``, so the hook's own pre-step capture would be too early).
- Logged values: ``trainer.callback_metrics`` at each step (names without ``val``/``test``),
  and after each validation run in EVAL mode without their ``val_`` prefix (``val_loss`` is
  ``loss`` in EVAL mode); the learning rate of the first parameter group as ``learning_rate``.
- A stop requested by the job sets ``trainer.should_stop``. Under DDP each rank writes as
  ``worker_<rank>``.
"""

from __future__ import annotations

import os
from typing import Any

from torch import nn

from tensortap.core.modes import ModeKeys
from tensortap.pytorch.hook import Hook
from tensortap.pytorch.trainer_session import TrainerSession

_EVAL_PREFIXES = ("val_", "val/", "validation_", "valid_")
_OTHER_PREFIXES = ("val", "valid", "test", "predict")


class CallbackMixin:
    """The callback's behaviour, shared by the ``lightning.pytorch`` and ``pytorch_lightning``
    classes (each Trainer accepts only its own ``Callback`` subclasses)."""

    def __init__(
        self,
        out_dir: str | os.PathLike[str] | None = None,
        hook: Hook | None = None,
        **hook_kwargs: Any,
    ) -> None:
        """``hook``: a :class:`tensortap.pytorch.Hook` to use; otherwise one is made when fitting
        starts (in ``out_dir``, by default ``<trainer.default_root_dir>/tensortap``) with the
        other keyword arguments (``save_config``, ``include_collections``, ...)."""
        self.session = TrainerSession(hook, out_dir, **hook_kwargs)
        self._global_step = 0

    @property
    def hook(self) -> Hook | None:
        return self.session.hook

    def on_fit_start(self, trainer: Any, pl_module: nn.Module) -> None:
        hook = self.session.start(pl_module, os.path.join(trainer.default_root_dir, "tensortap"))
        hook.gradients_on_request()  # on_before_optimizer_step: after Lightning's backward
        self._global_step = trainer.global_step

    def on_train_start(self, trainer: Any, pl_module: nn.Module) -> None:
        # after Lightning restored a checkpoint's loops (on_fit_start is before)
        self._global_step = trainer.global_step
        self.session.follow(trainer.global_step, "the Trainer's global_step")

    def on_sanity_check_start(self, trainer: Any, pl_module: nn.Module) -> None:
        if self.session.hook is not None:
            self.session.hook.pause()  # not a validation of the model being trained

    def on_sanity_check_end(self, trainer: Any, pl_module: nn.Module) -> None:
        if self.session.hook is not None:
            self.session.hook.resume()

    def on_train_batch_start(self, trainer: Any, pl_module: nn.Module, *args: Any) -> None:
        hook = self.session.hook
        if hook is not None:
            self.session.close_step()
            hook.forward_starts(pl_module)

    def on_before_optimizer_step(self, trainer: Any, pl_module: nn.Module, optimizer: Any) -> None:
        if self.session.hook is not None:
            self.session.hook.save_gradients()

    def on_train_batch_end(
        self, trainer: Any, pl_module: nn.Module, outputs: Any, *args: Any
    ) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        self.session.add_loss(loss, share=True)  # Lightning divided it by the accumulation
        if trainer.global_step == self._global_step:
            return  # an accumulating batch: the optimizer step is still to come
        self._global_step = trainer.global_step
        self.session.end_step()
        if self.session.metrics_due():
            metrics = {
                k: v
                for k, v in trainer.callback_metrics.items()
                if not k.startswith(_OTHER_PREFIXES) and k != "loss"
            }
            if trainer.optimizers:
                metrics["learning_rate"] = trainer.optimizers[0].param_groups[0]["lr"]
            self.session.save_metrics(metrics, ModeKeys.TRAIN)
        if self.session.stop_requested() is not None:
            trainer.should_stop = True

    def on_validation_start(self, trainer: Any, pl_module: nn.Module) -> None:
        if self.session.hook is not None and not trainer.sanity_checking:
            self.session.close_step()

    def on_validation_batch_start(self, trainer: Any, pl_module: nn.Module, *args: Any) -> None:
        if self.session.hook is not None and not trainer.sanity_checking:
            self.session.hook.forward_starts(pl_module)

    def on_validation_end(self, trainer: Any, pl_module: nn.Module) -> None:
        hook = self.session.hook
        if hook is None or trainer.sanity_checking:
            return
        values = {k: v for k, v in trainer.callback_metrics.items() if k.startswith(_EVAL_PREFIXES)}
        for prefix in _EVAL_PREFIXES:
            values = {k.removeprefix(prefix): v for k, v in values.items()}
        self.session.save_metrics(values, ModeKeys.EVAL)
        self.session.end_evaluation()

    def on_fit_end(self, trainer: Any, pl_module: nn.Module) -> None:
        self.session.finish()

    def on_exception(self, trainer: Any, pl_module: nn.Module, exception: BaseException) -> None:
        self.session.finish()
