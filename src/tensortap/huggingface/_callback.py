"""``TensortapCallback``: the PyTorch hook inside a Hugging Face ``Trainer``.

::

    from tensortap.huggingface import TensortapCallback

    trainer = Trainer(model, args, train_dataset=..., eval_dataset=...,
                      callbacks=[TensortapCallback()])          # or report_to="tensortap"

- Steps are the Trainer's optimizer steps (gradient accumulation counted once): tensortap's
  TRAIN step ``k`` is the Trainer's ``global_step`` ``k + 1``, also after
  ``trainer.train(resume_from_checkpoint=...)`` into the same trial (a new session, whose
  steps continue the Trainer's count).
- ``loss`` is the step's loss as the Trainer optimises and logs it, whoever computed it (the
  model, the label smoother, ``compute_loss_func``, a ``compute_loss`` override): the sum of
  what its micro-batches passed to ``backward()``, which the Trainer has already divided for
  gradient accumulation (or scaled by ``num_items_in_batch``). It equals the Trainer's logged
  ``loss`` at ``logging_steps=1`` (under DDP, the mean over the workers does), except that a
  NaN stays NaN.
- Gradients are saved after accumulation and *before* clipping (``max_grad_norm``), with the
  clip's threshold as ``gradient_clip/max_norm``; weights after the update; activations of the
  modules the collections name, as with the PyTorch hook.
- What the Trainer logs goes in ``metrics`` (``learning_rate``, ``grad_norm``, ``epoch``); each
  evaluation is one EVAL step holding its metrics, ``eval_loss`` as ``loss`` in EVAL mode, an
  evaluation after ``train()`` returned included. Losses and metrics are saved at every step
  unless their schedule was configured, and at every evaluation. Throughput figures and the
  end-of-training summary (``train_runtime``, ``train_loss``: the mean over the whole run) are
  not saved.
- A stop requested by the job (a rule's stop action) sets ``control.should_training_stop``.
- Under DDP each rank writes as ``worker_<rank>``; under FSDP2 statistics are of whole tensors.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

from torch import nn
from transformers import TrainerCallback

from tensortap.core._modes import ModeKeys
from tensortap.huggingface._config import trainer_config
from tensortap.pytorch._hook import Hook
from tensortap.pytorch._trainer_session import TrainerSession


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

    @property
    def hook(self) -> Hook | None:
        return self.session.hook

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        model = kwargs.get("model")
        if not isinstance(model, nn.Module):
            return
        hook = self.session.start(model, os.path.join(args.output_dir, "tensortap"))
        self.session.follow(state.global_step, "the Trainer's global_step")  # 0, or resumed
        hook.losses_from_backward(self.session.add_backward_loss)
        hook.gather_config(partial(trainer_config, args))
        scaler = getattr(kwargs.get("optimizer"), "scaler", None)  # Accelerate's, under fp16
        if scaler is not None:
            hook.register_grad_scaler(scaler)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.session.close_step()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        hook = self.session.hook
        if hook is not None:  # the model's inputs are keywords, which its pre-hook misses
            hook.count_samples(args.per_device_train_batch_size * args.gradient_accumulation_steps)
        self.session.end_step()
        reason = self.session.stop_requested()
        if reason is not None:
            control.should_training_stop = True

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if not logs or any(k.startswith("eval_") for k in logs) or "train_runtime" in logs:
            return  # an evaluation's (saved by on_evaluate), or the summary of the whole run
        train = {k: v for k, v in logs.items() if k != "loss"}  # the step's own is saved
        self.session.save_metrics(train, ModeKeys.TRAIN)

    def on_evaluate(
        self, args: Any, state: Any, control: Any, metrics: Any = None, **kwargs: Any
    ) -> None:
        self.session.evaluation_hook()  # after train() returned: a hook that writes on
        if metrics:
            self.session.save_metrics(metrics, ModeKeys.EVAL, prefix="eval_")
        self.session.end_evaluation()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.session.finish()
