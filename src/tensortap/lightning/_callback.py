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
  accumulation and Lightning's unscaling, before the update and before
  ``gradient_clip_val`` clips them (Lightning runs the backward pass inside
  ``optimizer.step``, so the hook's own pre-step capture would be too early); the clip's
  threshold is saved as ``gradient_clip/max_norm`` (``max_value`` when clipping by value).
- Logged values (``trainer.callback_metrics``), each saved once, when Lightning computes it:
  those logged by training steps at each optimizer step; those Lightning computes at an
  epoch's end (``*_epoch``, ``on_epoch=True`` logs of training steps) once per epoch (in the
  epoch's last step, or the next epoch's first when a validation closed it: Lightning computes
  them after the validation at the epoch's end); those logged by validation after each
  validation run in EVAL mode, a ``val_`` prefix removed (``val_loss`` is ``loss`` in EVAL
  mode). Which are which is learnt from when they appear, not from their names (a training
  ``value_loss`` is a training value). The learning rate of the first parameter group is
  saved as ``learning_rate``.
- A ``trainer.validate()`` after ``fit`` returned is recorded too: one more EVAL step.
- The outcome of a validation that computes no loss (``argmax == y`` counted by hand) is
  taken from the batch's targets and the model's scores (:mod:`._validation_scores`).
- A stop requested by the job sets ``trainer.should_stop``. Under DDP each rank writes as
  ``worker_<rank>``.
"""

from __future__ import annotations

import math
import os
from functools import partial
from typing import Any

from torch import nn

from tensortap.core._modes import ModeKeys
from tensortap.lightning._config import fit_config
from tensortap.lightning._validation_scores import ValidationScores
from tensortap.pytorch._config import first_batch_size
from tensortap.pytorch._hook import Hook
from tensortap.pytorch._trainer_session import TrainerSession
from tensortap.pytorch._vitals import batch_size

_EVAL_PREFIXES = ("val_", "val/", "validation_", "valid_")
#: Names no training step logs: the test and predict loops' (and validation's, by prefix).
_NOT_TRAIN_PREFIXES = (*_EVAL_PREFIXES, "test_", "test/", "predict_", "predict/")


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
        self._names_at_step: set[str] = set()  # callback_metrics' names at the last step
        self._before_validation: dict[str, float] = {}
        self._eval_names: set[str] = set()  # names that first appeared in a validation
        self._epoch_names: set[str] = set()  # names that first appeared at an epoch's end
        self._epoch_values: dict[str, Any] = {}  # an epoch's values, not saved yet
        self._batch_seen = False  # the first training batch's size is in the configuration
        self._scores = ValidationScores()  # the outcome of a validation without a loss

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
        if self.session.hook is not None:
            self.session.hook.gather_config(partial(fit_config, trainer, pl_module))

    def on_sanity_check_start(self, trainer: Any, pl_module: nn.Module) -> None:
        if self.session.hook is not None:
            self.session.hook.pause()  # not a validation of the model being trained

    def on_sanity_check_end(self, trainer: Any, pl_module: nn.Module) -> None:
        if self.session.hook is not None:
            self.session.hook.resume()

    def on_train_batch_start(self, trainer: Any, pl_module: nn.Module, *args: Any) -> None:
        if trainer.global_step < self._global_step:
            self._branch(trainer, pl_module)
        hook = self.session.hook
        if hook is not None:
            self.session.close_step()
            hook.forward_starts(pl_module)
            if not self._batch_seen and args:
                self._batch_seen = True
                hook.gather_config(partial(_batch_size, args[0]))
            size = batch_size(args[:1])
            if size is not None:
                hook.count_samples(size)

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
        went_back = trainer.global_step < self._global_step  # rolled back during this batch
        self._global_step = trainer.global_step
        self.session.end_step()
        self._names_at_step = set(trainer.callback_metrics)
        if self.session.metrics_due():
            metrics = {
                k: v
                for k, v in trainer.callback_metrics.items()
                if self._logged_by_training_step(k) and k != "loss"
            }
            metrics.update(self._epoch_values)  # the last epoch's, once
            self._epoch_values = {}
            if trainer.optimizers:
                metrics["learning_rate"] = trainer.optimizers[0].param_groups[0]["lr"]
            self.session.save_metrics(metrics, ModeKeys.TRAIN)
        if self.session.stop_requested() is not None:
            trainer.should_stop = True
        if went_back:
            self._branch(trainer, pl_module)

    def _branch(self, trainer: Any, pl_module: nn.Module) -> None:
        """The fit's state was put back to an earlier step in place (a ``RollbackCallback``
        restored an in-memory checkpoint): this session ends, and a new one numbers its TRAIN
        steps from the restored ``global_step`` (the rollback records it as a branch). A hook
        not made here (given, or the job's) goes on, counting those steps again."""
        self.session.finish()
        self.on_fit_start(trainer, pl_module)
        self.on_train_start(trainer, pl_module)

    def _logged_by_training_step(self, name: str) -> bool:
        return not (
            name in self._eval_names
            or name in self._epoch_names
            or name.endswith("_epoch")
            or name.startswith(_NOT_TRAIN_PREFIXES)
        )

    def on_train_epoch_end(self, trainer: Any, pl_module: nn.Module) -> None:
        """Lightning has computed the epoch's values (``*_epoch``, ``on_epoch`` logs): save
        them once, in the epoch's last step if it is still open, else in the next step."""
        metrics = trainer.callback_metrics
        self._epoch_names.update(
            k for k in metrics if k not in self._names_at_step and k not in self._eval_names
        )
        self._epoch_values = {
            k: v
            for k, v in metrics.items()
            if (k in self._epoch_names or k.endswith("_epoch"))
            and k not in self._eval_names
            and not k.startswith(_NOT_TRAIN_PREFIXES)
        }
        if self._epoch_values and self.session.train_step_open and self.session.metrics_due():
            self.session.save_metrics(self._epoch_values, ModeKeys.TRAIN)
            self._epoch_values = {}

    def on_validation_start(self, trainer: Any, pl_module: nn.Module) -> None:
        self._before_validation = _floats(trainer.callback_metrics)
        if trainer.sanity_checking:
            return
        if self.session.evaluation_hook(pl_module) is not None:  # after fit: writes on
            self.session.close_step()

    def on_validation_batch_start(self, trainer: Any, pl_module: nn.Module, *args: Any) -> None:
        hook = self.session.hook
        if hook is not None and not trainer.sanity_checking:
            hook.forward_starts(pl_module)
            if args:
                self._scores.start(hook, args[0])

    def on_validation_batch_end(self, trainer: Any, pl_module: nn.Module, *args: Any) -> None:
        hook = self.session.hook
        if hook is not None and not trainer.sanity_checking:
            self._scores.end(hook)
        else:
            self._scores.stop()

    def on_validation_end(self, trainer: Any, pl_module: nn.Module) -> None:
        self._scores.stop()
        metrics, before = trainer.callback_metrics, self._before_validation
        self._eval_names.update(k for k in metrics if k not in before)
        now = _floats(metrics)
        changed = {k for k, v in now.items() if k in before and not _same(v, before[k])}
        hook = self.session.hook
        if hook is None or trainer.sanity_checking:
            return
        values = {
            k: v
            for k, v in metrics.items()
            if k in self._eval_names or k in changed or k.startswith(_EVAL_PREFIXES)
        }
        for prefix in _EVAL_PREFIXES:
            values = {k.removeprefix(prefix): v for k, v in values.items()}
        self.session.save_metrics(values, ModeKeys.EVAL)
        self.session.end_evaluation()

    def on_fit_end(self, trainer: Any, pl_module: nn.Module) -> None:
        self.session.finish()

    def on_exception(self, trainer: Any, pl_module: nn.Module, exception: BaseException) -> None:
        self._scores.stop()
        self.session.finish()


def _floats(metrics: Any) -> dict[str, float]:
    """``callback_metrics`` as numbers (what is not one number is left out)."""
    out = {}
    for key, value in metrics.items():
        try:
            out[key] = float(value)
        except (TypeError, ValueError, RuntimeError):
            continue
    return out


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _batch_size(batch: Any) -> dict[str, Any]:
    size = first_batch_size(batch)
    return {} if size is None else {"batch_size": size}
