"""TreeDepth: boosted trees that do not grow to the depth meant, or grow past it (XGBoost)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.rules._rule import Rule

DIRECTIONS = ("shallower", "deeper")
#: Where the hook saved the booster's parameters (once, at the first round).
MAX_DEPTH = "hyperparameters/max_depth"
#: Without ``depth``, trees are shallow below this share of the booster's ``max_depth``. The
#: first 10 rounds of healthy boosters on 7 scikit-learn data sets had a median depth of 4 to
#: 6 at max_depth 6 (3 at 3); an over-regularised one (gamma=50) grew 0 or 1.
SHALLOW_SHARE = 0.5
#: ... and smdebug's depth, where the booster's max_depth is not saved (or 0: unlimited).
DEFAULT_DEPTH = 4


class TreeDepth(Rule):
    """Judges the trees each boosting round added (the XGBoost hook's ``trees`` collection).

    - ``direction="shallower"`` (the default, smdebug's meaning): fires when the round's trees
      are shallower than ``depth``, judged by their median depth, until a round's trees
      reached it. XGBoost rejects splits that do not reduce the loss enough (``gamma``,
      ``min_child_weight``), so trees that never grow mean the model is over-regularised or
      has nothing to learn; trees that grew and later stop short are normal (the model has
      little left to learn: healthy boosters end with trees of depth 1), not judged a problem.
    - ``direction="deeper"``: fires when some tree is deeper than ``depth``, the limit you
      meant (a ``max_depth`` typo, ``grow_policy="lossguide"`` without ``max_depth``).

    Without ``depth`` it is read from the booster's ``max_depth``, which the hook saves as
    ``hyperparameters/max_depth``: "shallower" means below half of it, "deeper" beyond it.
    Where it is not saved (or is 0, no limit), ``depth`` is 4, as in smdebug.

    A tree's depth is the depth of its deepest leaf (a single leaf has depth 0).
    """

    collections_needed = ("trees", "hyperparameters")

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        depth = params["depth"]
        direction = params["direction"]
        if depth is not None:
            cls.check_param("depth", depth, depth >= 0, "an integer >= 0")
        cls.check_param("direction", direction, direction in DIRECTIONS, " or ".join(DIRECTIONS))

    def __init__(
        self, base_trial: Any, depth: int | None = None, direction: str = "shallower"
    ) -> None:
        super().__init__(base_trial)
        self.depth, self.direction = depth, direction
        self._grown_at: int | None = None  # the first round whose trees reached the depth

    def _expected(self, step: int) -> tuple[float, str]:
        """The depth to compare with, and where it came from."""
        if self.depth is not None:
            return float(self.depth), "the expected depth"
        trial = self.base_trial
        max_depth = None
        if trial.has_tensor(MAX_DEPTH):
            steps = trial.tensor(MAX_DEPTH).steps()
            if steps:
                max_depth = float(np.ravel(trial.tensor(MAX_DEPTH).value(steps[0]))[0])
        if max_depth is None or not math.isfinite(max_depth) or max_depth <= 0:
            return float(DEFAULT_DEPTH), "the default depth"
        if self.direction == "deeper":
            return max_depth, "the booster's max_depth"
        return SHALLOW_SHARE * max_depth, f"half the booster's max_depth ({max_depth:g})"

    def invoke_at_step(self, step: int) -> bool:
        trial = self.base_trial
        if not (trial.has_tensor("trees/tree") and trial.has_tensor("trees/depth")):
            raise self.skip("no trees saved (include the trees collection)")
        per_tree = depth_per_tree(
            trial.tensor("trees/tree").value(step), trial.tensor("trees/depth").value(step)
        )
        if not per_tree.size:
            raise self.skip("no tree was added at this step")
        depth, what = self._expected(step)
        if self.direction == "shallower":
            value = float(np.median(per_tree))
            fired = value < depth
            message = f"the median depth of this round's {per_tree.size} trees, {value:g},"
            if not fired and self._grown_at is None:
                self._grown_at = step
            if fired and self._grown_at is not None:
                self.explain(
                    f"{message} is shallower than {what}, {depth:g}, but trees reached it "
                    f"at step {self._grown_at}: later trees stop short as the model has "
                    "little left to learn (normal)",
                    tensors=["trees/depth"],
                    value=value,
                    threshold=depth,
                    direction=self.direction,
                )
                return False
            verb = "is shallower than" if fired else "reaches"
        else:
            value = float(per_tree.max())
            fired = value > depth
            verb = "is deeper than" if fired else "is within"
            message = f"the deepest of this round's {per_tree.size} trees, at {value:g},"
        self.explain(
            f"{message} {verb} {what}, {depth:g}",
            tensors=["trees/depth"],
            value=value,
            threshold=depth,
            direction=self.direction,
        )
        return fired


def depth_per_tree(trees: np.ndarray, depths: np.ndarray) -> np.ndarray:
    """The depth of each tree (its deepest node), from the XGBoost hook's ``trees/tree`` and
    ``trees/depth`` columns."""
    return np.asarray([depths[trees == t].max() for t in np.unique(trees)])
