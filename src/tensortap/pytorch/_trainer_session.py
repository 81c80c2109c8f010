"""What a trainer callback (Hugging Face, Lightning) keeps between the trainer's events.

- **The hook:** the one given; else the one the process has (made by ``tensortap run`` or the
  script); else one made from the job's configuration (``$TENSORTAP_CONFIG``); else a new one in
  the directory given or the trainer's output directory. Its steps are the trainer's: automatic
  step detection is off, and a step is one optimizer step (gradient accumulation counted once).
- **Steps:** the trainer says when an optimizer step ended; the step stays open until the next
  one begins, so that what the trainer logs right after it (learning rate, gradient norm) lands
  in it. An evaluation is one EVAL step holding the evaluation's metrics. TRAIN steps are
  numbered by the trainer's global step (a run resumed from a checkpoint continues them, in the
  same trial: a new session), evaluations after the trial's last one. A fit of another model
  than the trial's last in this process, from its first step (a fine-tuning after a
  pre-training, whichever hook writes it), is a new stage of training (``training_loop/stage``
  at its first step): its TRAIN steps go on after the trial's, and the rules that compare
  losses over time start again there.
- **The loss:** the step's loss over its micro-batches, as the trainer optimises and logs it
  (the adapter says how it is known), saved as ``loss`` in ``losses``; an evaluation's loss is
  ``loss`` in EVAL mode, so that TRAIN and EVAL losses compare (``Overfit``).
- **An evaluation after training** (``trainer.evaluate()``, ``trainer.validate()`` once
  ``train``/``fit`` returned): the hook made here was closed when training ended (so that
  readers know training ended), so a new one writes the evaluation's EVAL step on in the same
  trial, numbered after the steps before it, and is closed when the evaluation ends.
- **Stopping:** a stop requested by the job (a rule's action) is reported to the callback, which
  asks the trainer to stop gracefully.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from tensortap.core._collections import CollectionKeys
from tensortap.core._modes import ModeKeys
from tensortap.core._save_config import SaveConfig, SaveConfigMode
from tensortap.core._stop import StopRequest
from tensortap.hook._config import CONFIG_ENV, read_config
from tensortap.pytorch._hook import Hook, get_hook

logger = logging.getLogger(__name__)

#: Logged values that describe the run's speed, not its training: not saved (``eval_runtime``,
#: ``train_samples_per_second``, ``total_flos``; matched on the name as logged).
_SKIPPED_SUFFIXES = ("_runtime", "_per_second", "total_flos")


class TrainerSession:
    """See the module docstring. ``hook_kwargs`` are :class:`tensortap.pytorch.Hook`'s."""

    def __init__(
        self, hook: Hook | None, out_dir: str | os.PathLike[str] | None, **hook_kwargs: Any
    ) -> None:
        self.hook = hook
        self.out_dir = out_dir
        self.hook_kwargs = hook_kwargs
        self.owned = False
        self._default_dir: str | os.PathLike[str] | None = None
        self._after_training = False  # the hook is one made for an evaluation after training
        self._stop: StopRequest | None = None
        self._open: int | None = None  # the TRAIN step that ended but is kept open
        self._losses: list[torch.Tensor] = []
        self._shares = True
        # TRAIN steps before this session's model began training in the trial (a new stage
        # of training: another model than the trial's last fit), which its trainer's count
        # starts after
        self._offset = 0
        self._another = False  # the fit started trains another model than the trial's last

    # -- lifecycle --
    def start(self, model: nn.Module, default_dir: str | os.PathLike[str]) -> Hook:
        """At the start of training: find or make the hook and watch ``model`` (a hook made
        here for an earlier training and closed at its end is made again: a new session)."""
        self._default_dir = default_dir
        if self.hook is None or (self.owned and self.hook.closed):
            self.hook, self.owned = self._make_hook(default_dir)
        if not self.hook.watches(model):
            self.hook.register_module(model)
        self._another = self.hook.fit_begins(model)  # a new stage unless resumed (follow)
        self.hook.stop_automatic_steps()
        self._schedule_losses_and_metrics(self.hook)
        return self.hook

    @staticmethod
    def _schedule_losses_and_metrics(hook: Hook) -> None:
        """Losses and metrics are a few numbers per step. Left at the library's default
        schedule (every 500th step) they are saved at every step; as configured otherwise,
        their TRAIN schedule stays. An evaluation is one EVAL step: they are saved at every one,
        or the rules comparing TRAIN and EVAL would see only every 500th evaluation."""
        every = SaveConfigMode(save_interval=1)
        for name in (CollectionKeys.LOSSES, CollectionKeys.METRICS):
            coll = hook.get_collection(name)
            base = hook.save_config_of(name)
            if base == SaveConfig():
                coll.save_config = SaveConfig(save_interval=1)
                continue
            modes = dict(base.mode_save_configs)
            modes[ModeKeys.EVAL] = every
            coll.save_config = SaveConfig(mode_save_configs=modes)

    def _make_hook(self, default_dir: str | os.PathLike[str]) -> tuple[Hook, bool]:
        existing = get_hook()
        if existing is not None:
            return existing, False
        overrides = {**self.hook_kwargs, "auto_step": False}
        if self.out_dir is None and os.environ.get(CONFIG_ENV):
            config = read_config()
            if config.stop_file:
                self._stop = StopRequest(config.stop_file)
            return config.create_hook(Hook, stop_file=None, **overrides), True
        out_dir = self.out_dir if self.out_dir is not None else default_dir
        return Hook(out_dir, **overrides), True

    def follow(self, trainer_step: int, source: str) -> None:
        """Training starts at the trainer's optimizer step ``trainer_step`` (its global step,
        restored from a checkpoint when resumed): TRAIN steps are numbered from it, so that
        tensortap's step k stays the trainer's step k + 1 (see ``Hook.continue_at``). In a fit
        of another model than the trial's last, from its first step (a new stage of training,
        whose trainer counts from 0 again), they are numbered on after the steps before it:
        step k + offset. A fit of another model object resumed from a checkpoint (a trainer
        step above 0) is the same run going on."""
        hook = self.hook
        if hook is None:
            return
        if self._another:  # another model than the last fit's: a stage of its own, unless
            self._another = False  # its trainer resumed a checkpoint (the same run goes on)
            self._offset = 0
            if trainer_step == 0:
                hook.begin_stage()
                self._offset = hook.recorder.counts().get(ModeKeys.TRAIN, 0)
        hook.continue_at(int(trainer_step) + self._offset, ModeKeys.TRAIN, source)

    def finish(self) -> None:
        """At the end of training: close the open step; close the hook if it was made here."""
        self.close_step()
        if self.hook is not None and self.owned:
            self.hook.close()

    def evaluation_hook(self, model: nn.Module | None = None) -> Hook | None:
        """The hook an evaluation saves into: the training's while it is open; after training,
        when this session closed its hook, a new one (watching ``model`` when given) in EVAL
        mode writing on in the same trial, numbered after the closed one's steps. None when
        training never started here."""
        hook = self.hook
        if hook is None or not hook.closed or not self.owned or self._default_dir is None:
            return hook
        new, self.owned = self._make_hook(self._default_dir)
        new.continue_after(hook)
        if model is not None and not new.watches(model):
            new.register_module(model)
        new.stop_automatic_steps()
        self._schedule_losses_and_metrics(new)
        new.set_mode(ModeKeys.EVAL)
        self.hook, self._after_training = new, True
        return new

    # -- training steps --
    def add_backward_loss(self, loss: torch.Tensor) -> None:
        """The loss of one backward pass of the step (see ``Hook.losses_from_backward``): a
        share of the step's loss, already divided for gradient accumulation."""
        if self.hook is not None and self.hook.mode == ModeKeys.TRAIN:
            self.add_loss(loss, share=True)

    def add_loss(self, loss: Any, share: bool = False) -> None:
        """A micro-batch's loss (a 0-d tensor), while training. ``share``: the trainer already
        divided it by the whole accumulated batch's size, so the step's loss is the sum."""
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            if not self._losses and self.hook is not None:
                self.hook.losses_on_request()  # the backward pass's loss is not taken too
            self._losses.append(loss.detach().reshape(()))
            self._shares = self._shares and share

    def end_step(self) -> None:
        """An optimizer step ended: save its loss; the step stays open for what is logged."""
        hook = self.hook
        if hook is None:
            return
        if self._open is not None:
            self.close_step()
        losses, self._losses = self._losses, []
        shares, self._shares = self._shares, True
        if len(losses) == 1 and hook.mode == ModeKeys.TRAIN:
            hook.record_loss(losses[0])
        elif losses and hook.mode == ModeKeys.TRAIN:
            stacked = torch.stack([x.float() for x in losses])
            hook.record_loss(stacked.sum() if shares else stacked.mean())
        self._open = hook.step

    @property
    def train_step_open(self) -> bool:
        """Whether a TRAIN step ended and is still open (nothing, like an evaluation, closed
        it since): what the trainer logs now belongs to it."""
        hook = self.hook
        return (
            hook is not None
            and self._open is not None
            and hook.mode == ModeKeys.TRAIN
            and hook.step == self._open
        )

    def close_step(self) -> None:
        """Close the TRAIN step kept open (if nothing, like an evaluation, closed it since)."""
        hook, step, self._open = self.hook, self._open, None
        if hook is not None and step is not None and hook.step == step:
            hook.next_step()

    # -- values the trainer logs --
    def save_metrics(self, values: Mapping[str, Any], mode: ModeKeys, prefix: str = "") -> None:
        """Save numbers the trainer logged: in ``mode`` (a value logged in another mode than the
        hook's current one is skipped), ``prefix`` removed from names, a name ``loss`` in
        ``losses`` and everything else in ``metrics``."""
        hook = self.hook
        if hook is None or hook.mode != mode:
            return
        for key, value in values.items():
            name = key[len(prefix) :] if prefix and key.startswith(prefix) else key
            if key.endswith(_SKIPPED_SUFFIXES) or not _is_number(value):
                continue
            if name == "loss":
                hook.record_loss(float(value))
            else:
                hook.save_scalar(name, float(value), CollectionKeys.METRICS)

    def metrics_due(self) -> bool:
        """Whether logged values can be saved at this step (``metrics`` or ``scalars`` due)."""
        hook = self.hook
        return hook is not None and any(
            hook.is_collection_due(c) for c in (CollectionKeys.METRICS, CollectionKeys.SCALARS)
        )

    def end_evaluation(self) -> None:
        """An evaluation ended (its metrics saved): close its EVAL step (and the hook, when it
        was made for an evaluation after training)."""
        hook = self.hook
        if hook is not None and hook.mode == ModeKeys.EVAL:
            hook.next_step()
        if hook is not None and self._after_training:
            self._after_training = False
            if self.owned:
                hook.close()

    def stop_requested(self) -> str | None:
        return None if self._stop is None else self._stop.requested()


def _is_number(value: Any) -> bool:
    """A real number (NaN included: it is a finding, saved as it is)."""
    if isinstance(value, torch.Tensor):
        return value.numel() == 1 and not value.is_complex()
    return isinstance(value, int | float) and not isinstance(value, bool)
