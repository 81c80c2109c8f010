"""TreeDepth: boosted trees that do not grow to the depth meant, or grow past it (XGBoost)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tensortap.rules.rule import Rule

DIRECTIONS = ("shallower", "deeper")


class TreeDepth(Rule):
    """Judges the trees each boosting round added (the XGBoost hook's ``trees`` collection).

    - ``direction="shallower"`` (the default, smdebug's meaning): fires when the round's trees
      are shallower than ``depth``, judged by their median depth. XGBoost rejects splits that
      do not reduce the loss enough (``gamma``, ``min_child_weight``), so trees that stop
      growing early mean the model has little left to learn, or is over-regularised.
    - ``direction="deeper"``: fires when some tree is deeper than ``depth``, the limit you
      meant (a ``max_depth`` typo, ``grow_policy="lossguide"`` without ``max_depth``).

    A tree's depth is the depth of its deepest leaf (a single leaf has depth 0).
    """

    collections_needed = ("trees",)

    def __init__(self, base_trial: Any, depth: int = 4, direction: str = "shallower") -> None:
        super().__init__(base_trial)
        self.check_param("depth", depth, depth >= 0, "an integer >= 0")
        self.check_param("direction", direction, direction in DIRECTIONS, " or ".join(DIRECTIONS))
        self.depth, self.direction = depth, direction

    def invoke_at_step(self, step: int) -> bool:
        trial = self.base_trial
        if not (trial.has_tensor("trees/tree") and trial.has_tensor("trees/depth")):
            raise self.skip("no trees saved (include the trees collection)")
        per_tree = depth_per_tree(
            trial.tensor("trees/tree").value(step), trial.tensor("trees/depth").value(step)
        )
        if not per_tree.size:
            raise self.skip("no tree was added at this step")
        if self.direction == "shallower":
            value = float(np.median(per_tree))
            fired = value < self.depth
            verb = "is shallower than" if fired else "reaches"
            message = f"the median depth of this round's {per_tree.size} trees, {value:g},"
        else:
            value = float(per_tree.max())
            fired = value > self.depth
            verb = "is deeper than" if fired else "is within"
            message = f"the deepest of this round's {per_tree.size} trees, at {value:g},"
        self.explain(
            f"{message} {verb} the expected depth {self.depth}",
            tensors=["trees/depth"],
            value=value,
            threshold=self.depth,
            direction=self.direction,
        )
        return fired


def depth_per_tree(trees: np.ndarray, depths: np.ndarray) -> np.ndarray:
    """The depth of each tree (its deepest node), from the XGBoost hook's ``trees/tree`` and
    ``trees/depth`` columns."""
    return np.asarray([depths[trees == t].max() for t in np.unique(trees)])
