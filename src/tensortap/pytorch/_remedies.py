"""The remedies a rollback tries for a numerics fault, before it stops (see
:mod:`tensortap.core._rollback_decision`): a lower learning rate, then tighter gradient clipping,
each for the next ``steps`` optimizer steps.

Both act through the optimizer's step hooks, so the training loop is not changed: before each
step the learning rate of every parameter group is multiplied by ``lr_factor`` (and put back
after it, so a learning-rate scheduler sees its own values), and the gradients are clipped to a
total norm of ``clip_norm``. A remedy tried stays on with the next one.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from tensortap.core._rollback_decision import LOWER_LR, REMEDIES, TIGHTER_CLIP
from tensortap.exceptions import InvalidConfigError

log = logging.getLogger(__name__)


class Remedies:
    """What :class:`~tensortap.pytorch.Rollback` (``remedies=``) may do to ``optimizer`` when a
    replay says a step went non-finite from finite data: ``"lower_lr"`` multiplies the
    learning rate by ``lr_factor``, ``"tighter_clip"`` clips the gradients' total norm to
    ``clip_norm``, each for the next ``steps`` optimizer steps; ``order``: those to try, in
    order."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        *,
        lr_factor: float = 0.1,
        clip_norm: float = 1.0,
        steps: int = 50,
        order: tuple[str, ...] = REMEDIES,
    ) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise InvalidConfigError(
                f"Remedies needs the torch.optim.Optimizer it acts on, got {optimizer!r}"
            )
        if isinstance(lr_factor, bool) or not isinstance(lr_factor, (int, float)):
            raise InvalidConfigError(f"Remedies lr_factor must be a number, got {lr_factor!r}")
        if not 0 < lr_factor < 1:
            raise InvalidConfigError(
                f"Remedies lr_factor must be within (0, 1) (it lowers the rate), got {lr_factor!r}"
            )
        if isinstance(clip_norm, bool) or not isinstance(clip_norm, (int, float)) or clip_norm <= 0:
            raise InvalidConfigError(f"Remedies clip_norm must be a number > 0, got {clip_norm!r}")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise InvalidConfigError(f"Remedies steps must be an int >= 1, got {steps!r}")
        order = tuple(order)
        if not order or any(name not in REMEDIES for name in order):
            raise InvalidConfigError(
                f"Remedies order must name some of {REMEDIES}, in the order to try them, got "
                f"{order!r}"
            )
        self.optimizer = optimizer
        self.lr_factor, self.clip_norm, self.steps = float(lr_factor), float(clip_norm), steps
        self.order = order
        self.active: set[str] = set()
        self.left = 0  #: optimizer steps the active remedies still last
        self._saved: list[Any] = []
        self._handles: list[Any] = []

    def apply(self, name: str) -> str:
        """Turn ``name`` on for the next :attr:`steps` steps (with those already on); returns
        what it does, in words."""
        if name not in self.order:
            raise InvalidConfigError(f"Remedies: {name!r} is not one of {self.order}")
        if not self._handles:
            self._handles = [
                self.optimizer.register_step_pre_hook(self._before),
                self.optimizer.register_step_post_hook(self._after),
            ]
        self.active.add(name)
        self.left = self.steps
        what = {
            LOWER_LR: f"the learning rate times {self.lr_factor:g}",
            TIGHTER_CLIP: f"gradients clipped to a total norm of {self.clip_norm:g}",
        }
        return " and ".join(what[n] for n in self.order if n in self.active) + (
            f" for the next {self.steps} steps"
        )

    def use(self, optimizer: torch.optim.Optimizer) -> None:
        """Act on ``optimizer`` from now on (a trainer built a new one: a remedy turned on
        stays on, for the steps it has left)."""
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise InvalidConfigError(
                f"Remedies.use needs the torch.optim.Optimizer to act on, got {optimizer!r}"
            )
        if optimizer is self.optimizer:
            return
        hooked = bool(self._handles)
        for handle in self._handles:
            handle.remove()
        self.optimizer, self._handles, self._saved = optimizer, [], []
        if hooked:
            self._handles = [
                optimizer.register_step_pre_hook(self._before),
                optimizer.register_step_post_hook(self._after),
            ]

    def remove(self) -> None:
        """Take the optimizer hooks away (the remedies end)."""
        for handle in self._handles:
            handle.remove()
        self._handles, self.active, self.left = [], set(), 0

    def _before(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.left <= 0:
            return
        try:
            if LOWER_LR in self.active:
                self._saved = [group["lr"] for group in optimizer.param_groups]
                for group in optimizer.param_groups:
                    group["lr"] = group["lr"] * self.lr_factor
            if TIGHTER_CLIP in self.active:
                grads = [
                    p
                    for group in optimizer.param_groups
                    for p in group["params"]
                    if p.grad is not None
                ]
                if grads:
                    torch.nn.utils.clip_grad_norm_(grads, self.clip_norm)
        except Exception:  # never break the step
            log.exception("tensortap: a remedy failed before the optimizer's step")

    def _after(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.left <= 0:
            return
        for group, lr in zip(optimizer.param_groups, self._saved, strict=False):
            group["lr"] = lr
        self._saved = []
        self.left -= 1
        if self.left == 0:
            log.warning("tensortap: the remedies %s ended", ", ".join(sorted(self.active)))
            self.active = set()


__all__ = ["Remedies"]
