"""FeatureImportanceOverweight: a model that leans on a few features (XGBoost)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import scalar


class FeatureImportanceOverweight(Rule):
    """Fires when the ``nfeatures`` most important features hold more than ``threshold`` (a
    fraction) of the total importance: the model leans on them, as it does on a feature that
    leaks the label.

    Importances: the scalars matching ``tensor_regex`` saved at the step, one per feature
    (the XGBoost hook's ``feature_importance/<type>/<feature>``; ``weight`` counts splits, pass
    ``.*feature_importance/gain`` to judge by gain). XGBoost lists only the features its trees
    use, so a model that uses ``nfeatures`` features or fewer holds all its importance there and
    fires.
    """

    collections_needed = ("feature_importance",)

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        threshold = params["threshold"]
        nfeatures = params["nfeatures"]
        cls.check_param("threshold", threshold, 0 < threshold <= 1, "a fraction in (0, 1]")
        cls.check_param("nfeatures", nfeatures, nfeatures >= 1, "an integer >= 1")

    def __init__(
        self,
        base_trial: Any,
        threshold: float = 0.8,
        nfeatures: int = 3,
        tensor_regex: str = ".*feature_importance/weight",
    ) -> None:
        super().__init__(base_trial)
        self.threshold, self.nfeatures, self.tensor_regex = threshold, nfeatures, tensor_regex

    def invoke_at_step(self, step: int) -> bool:
        names = self.base_trial.tensor_names(step=step, regex=self.tensor_regex)
        if not names:
            raise self.skip("no feature importance saved at this step")
        values = np.asarray([scalar(self.base_trial.tensor(n), step) for n in names])
        total = float(values.sum())
        if total <= 0:
            raise self.skip("the importances sum to zero")
        top = np.argsort(values)[::-1][: self.nfeatures]
        share = float(values[top].sum()) / total
        features = [names[i].rsplit("/", 1)[-1] for i in top]
        fired = share > self.threshold
        self.explain(
            f"the top {self.nfeatures} features ({', '.join(features)}) hold {100 * share:.3g}% "
            f"of the importance, {'over' if fired else 'within'} the limit "
            f"{100 * self.threshold:g}%",
            tensors=[names[i] for i in top],
            value=share,
            threshold=self.threshold,
        )
        return fired
