"""``TensortapCallback``: the PyTorch hook inside a Hugging Face ``Trainer``.

::

    from tensortap.huggingface import TensortapCallback

    trainer = Trainer(model, args, train_dataset=..., eval_dataset=...,
                      callbacks=[TensortapCallback()])          # or report_to="tensortap"

- Steps are the Trainer's optimizer steps (gradient accumulation counted once): tensortap's
  TRAIN step ``k`` is the Trainer's ``global_step`` ``k + 1``, also after
  ``trainer.train(resume_from_checkpoint=...)`` into the same trial (a new session, whose
  steps continue the Trainer's count).
- ``loss`` is the step's loss over its micro-batches, from the losses the model returned (their
  mean, or their sum when the Trainer passed ``num_items_in_batch`` so that each is already a
  share): the value the Trainer's own logs average, except that a NaN stays NaN.
- Gradients are saved right before ``optimizer.step()`` (after accumulation and clipping, on
  the optimizer the Trainer steps), weights after it; activations of the modules the collections
  name, as with the PyTorch hook.
- What the Trainer logs goes in ``metrics`` (``learning_rate``, ``grad_norm``, ``epoch``); each
  evaluation is one EVAL step holding its metrics, ``eval_loss`` as ``loss`` in EVAL mode.
  Losses and metrics are saved at every step unless their schedule was configured, and at
  every evaluation.
- A stop requested by the job (a rule's stop action) sets ``control.should_training_stop``.
- Under DDP each rank writes as ``worker_<rank>``; under FSDP2 statistics are of whole tensors.
"""

from __future__ import annotations

import os
from typing import Any

from torch import nn
from transformers import TrainerCallback

from tensortap.core.modes import ModeKeys
from tensortap.pytorch.hook import Hook
from tensortap.pytorch.trainer_session import TrainerSession


class TensortapCallback(TrainerCallback):
    """See the module docstring. ``hook``: a :class:`tensortap.pytorch.Hook` to use; otherwise
    one is made at the start of training (in ``out_dir``, by default
    ``<args.output_dir>/tensortap``) with the other keyword arguments (``save_config``,
    ``include_collections``, ``reduction_config``, ...)."""

    def __init__(
        self,
        out_dir: str | os.PathLike[str] | None = None,
        hook: Hook | None = None,
        **hook_kwargs: Any,
    ) -> None:
        self.session = TrainerSession(hook, out_dir, **hook_kwargs)
        self._loss_handle: Any = None

    @property
    def hook(self) -> Hook | None:
        return self.session.hook

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        model = kwargs.get("model")
        if not isinstance(model, nn.Module):
            return
        self.session.start(model, os.path.join(args.output_dir, "tensortap"))
        self.session.follow(state.global_step, "the Trainer's global_step")  # 0, or resumed
        if self._loss_handle is None:
            self._loss_handle = model.register_forward_hook(self._on_output, with_kwargs=True)

    def _on_output(self, module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        if not module.training:
            return
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        # Given num_items_in_batch, the model divides by the whole accumulated batch's size.
        self.session.add_loss(loss, share=kwargs.get("num_items_in_batch") is not None)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.session.close_step()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.session.end_step()
        reason = self.session.stop_requested()
        if reason is not None:
            control.should_training_stop = True

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if logs and not any(k.startswith("eval_") for k in logs):
            train = {k: v for k, v in logs.items() if k != "loss"}  # the step's own is saved
            self.session.save_metrics(train, ModeKeys.TRAIN)

    def on_evaluate(
        self, args: Any, state: Any, control: Any, metrics: Any = None, **kwargs: Any
    ) -> None:
        if metrics:
            self.session.save_metrics(metrics, ModeKeys.EVAL, prefix="eval_")
        self.session.end_evaluation()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._loss_handle is not None:
            self._loss_handle.remove()
            self._loss_handle = None
        self.session.finish()
