"""UnchangedTensor: a tensor that stayed the same over its last saved steps."""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.core._modes import ModeKeys
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import collection_names_param, has_raw, select, step_mode


class UnchangedTensor(Rule):
    """Fires when a selected tensor's last ``num_steps`` saved values (this one included) are
    all ``np.allclose(rtol, atol, equal_nan)`` to each other; it cannot fire before a tensor
    has that many saved steps. Steps are compared within their mode (EVAL steps never update
    weights, so they are not compared with TRAIN steps).

    Tensors: ``collection_names`` / ``tensor_regex``; when neither is given, ``weights`` and
    ``biases`` (smdebug looked at every tensor, which flags constants such as a fixed learning
    rate).
    """

    collections_needed = ("weights", "biases")

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        num_steps = params["num_steps"]
        cls.check_param("num_steps", num_steps, num_steps >= 2, "an integer >= 2")

    def __init__(
        self,
        base_trial: Any,
        collection_names: list[str] | None = None,
        tensor_regex: list[str] | None = None,
        num_steps: int = 3,
        rtol: float = 1e-5,
        atol: float = 1e-8,
        equal_nan: bool = False,
    ) -> None:
        super().__init__(base_trial)
        self.collection_names = collection_names or []
        self.tensor_regex = tensor_regex or []
        self.num_steps = num_steps
        self.rtol, self.atol, self.equal_nan = rtol, atol, equal_nan

    @classmethod
    def required_collections(cls, **params: Any) -> tuple[str, ...]:
        return tuple(collection_names_param(params)) or cls.collections_needed

    def _close(self, a: np.ndarray, b: np.ndarray) -> bool:
        return bool(np.allclose(a, b, rtol=self.rtol, atol=self.atol, equal_nan=self.equal_nan))

    def _window(self, steps: list[int], step: int, mode: ModeKeys) -> list[int]:
        """The last ``num_steps`` saved global steps of ``mode`` up to ``step``, oldest first."""
        window: list[int] = []
        for g in reversed(steps[: bisect.bisect_right(steps, step)]):
            if self.base_trial.mode(g) == mode:
                window.append(g)
                if len(window) == self.num_steps:
                    break
        return window[::-1]

    def invoke_at_step(self, step: int) -> bool:
        mode, _ = step_mode(self.base_trial, step)
        if mode in (ModeKeys.EVAL, ModeKeys.PREDICT):
            self.explain(f"{mode.name} steps do not update tensors; not compared")
            return False
        names = select(
            self.base_trial,
            self.collection_names,
            self.tensor_regex,
            step=step,
            default=self.collections_needed,
        )
        if not names:
            raise self.skip("no selected tensor saved at this step")
        judged = 0
        for name in names:
            tensor = self.base_trial.tensor(name)
            if not has_raw(tensor, step):
                continue
            window = self._window(tensor.steps(), step, mode)
            if len(window) < self.num_steps or not all(has_raw(tensor, g) for g in window):
                continue
            judged += 1
            values = [tensor.value(g) for g in window]
            if all(  # another shape is another tensor under this name (a new stage's model)
                v.shape == values[0].shape and self._close(values[0], v) for v in values[1:]
            ):
                self.explain(
                    f"{name} did not change over steps {window[0]}..{window[-1]} "
                    f"({self.num_steps} saved steps)",
                    tensors=[name],
                    value=0.0,
                    threshold=self.atol,
                )
                return True
        if not judged:
            raise self.skip(f"fewer than {self.num_steps} saved steps to compare so far")
        self.explain(f"{judged} tensors changed over their last {self.num_steps} saved steps")
        return False
