"""LossNotDecreasing: the loss did not drop by a given percentage over a number of steps."""

from __future__ import annotations

from typing import Any

from tensortap.core.modes import ModeKeys
from tensortap.rules.builtin._common import loss_names, newest_at_or_before, scalar, step_mode
from tensortap.rules.rule import Rule


class LossNotDecreasing(Rule):
    """Every ``num_steps`` steps, compares each loss at step s with its value at the newest
    saved step at or before s - num_steps, and fires if it did not drop by more than
    ``diff_percent`` percent.

    Steps are counted within ``mode``; without a mode, EVAL losses are used when the trial
    has any, else TRAIN, else GLOBAL. Losses: the ``losses`` collection (unless
    ``use_losses_collection`` is false) and tensors matching ``tensor_regex``.
    """

    collections_needed = ("losses",)

    def __init__(
        self,
        base_trial: Any,
        tensor_regex: list[str] | None = None,
        use_losses_collection: bool = True,
        num_steps: int = 10,
        diff_percent: float = 0.0,
        increase_threshold_percent: float = 100.0,
        mode: ModeKeys | None = None,
    ) -> None:
        super().__init__(base_trial)
        self.check_param("num_steps", num_steps, num_steps >= 1, "an integer >= 1")
        self.check_param(
            "diff_percent", diff_percent, -100 <= diff_percent <= 100, "between -100 and 100"
        )
        self.check_param(
            "increase_threshold_percent",
            increase_threshold_percent,
            increase_threshold_percent >= 0,
            "a number >= 0",
        )
        self.check_param(
            "tensor_regex",
            tensor_regex,
            use_losses_collection or bool(tensor_regex),
            "given when use_losses_collection is false (no loss would be checked)",
        )
        self.tensor_regex = tensor_regex or []
        self.use_losses_collection = use_losses_collection
        self.num_steps = num_steps
        self.diff_percent = diff_percent
        self.increase_threshold_percent = increase_threshold_percent
        self.mode = mode
        self._last_checked: dict[tuple[str, ModeKeys], int] = {}

    def _mode_in_use(self, mode: ModeKeys) -> ModeKeys | None:
        """The mode losses are compared in at a step of ``mode`` (None: not at this step)."""
        if self.mode is not None:
            return ModeKeys.GLOBAL if self.mode == ModeKeys.GLOBAL else self.mode
        if mode == ModeKeys.EVAL:
            return mode
        if mode == ModeKeys.TRAIN and not self.base_trial.steps(mode=ModeKeys.EVAL):
            return mode
        return None

    def invoke_at_step(self, step: int) -> bool:
        step_m, mstep = step_mode(self.base_trial, step)
        use = self._mode_in_use(step_m)
        if use is None or (use != ModeKeys.GLOBAL and use != step_m):
            self.explain(f"losses are compared in another mode than {step_m.name}")
            return False
        s = step if use == ModeKeys.GLOBAL else mstep
        mode_arg = None if use == ModeKeys.GLOBAL else use
        names = loss_names(self.base_trial, self.use_losses_collection, self.tensor_regex, step)
        if not names:
            raise self.skip("no loss saved at this step")
        fired, checked = False, False
        for name in names:
            key = (name, use)
            last = self._last_checked.get(key)
            if last is None:
                tensor_steps = self.base_trial.tensor(name).steps(mode=mode_arg)
                last = self._last_checked[key] = tensor_steps[0] if tensor_steps else s
            if s < last + self.num_steps:
                continue
            tensor = self.base_trial.tensor(name)
            previous = newest_at_or_before(tensor.steps(mode=mode_arg), s - self.num_steps)
            if previous is None:
                continue
            self._last_checked[key] = s
            checked = True
            before, now = scalar(tensor, previous, mode_arg), scalar(tensor, s, mode_arg)
            drop = 100.0 * (before - now) / abs(before) if before else -100.0 * (now > 0)
            if drop <= self.diff_percent:
                fired = True
                how = (
                    f"rose by {-drop:.3g}%"
                    + (" (diverging)" if -drop > self.increase_threshold_percent else "")
                    if drop < 0
                    else f"dropped only {drop:.3g}%"
                )
                self.explain(
                    f"{name} {how} from {before:.4g} at step {previous} to {now:.4g} at step "
                    f"{s} ({use.name}); expected a drop of more than {self.diff_percent:g}%",
                    tensors=[name],
                    value=drop,
                    threshold=self.diff_percent,
                    previous_step=previous,
                )
            elif not fired:
                self.explain(
                    f"{name} dropped {drop:.3g}% from step {previous} to {s}",
                    tensors=[name],
                    value=drop,
                    threshold=self.diff_percent,
                )
        if not checked:
            self.explain(f"not a check step (losses are compared every {self.num_steps} steps)")
        return fired
