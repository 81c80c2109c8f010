"""The XGBoost hook: an ``xgboost.callback.TrainingCallback``; every boosting round is a step.

::

    hook = tt.Hook(out_dir="runs/xgb", validation_data=dvalid)
    booster = xgb.train(params, dtrain, 100, evals=[(dtrain, "train"), (dvalid, "validation")],
                        callbacks=[hook])

Collections (all TRAIN mode; the default save config is every 10 rounds, as smdebug's):

- ``metrics``: every metric of every eval set, ``<set>-<metric>`` (``validation-logloss``);
- ``hyperparameters``: the booster's parameters, once, at step 0 (numbers only);
- ``feature_importance``: ``feature_importance/<type>/<feature>`` for weight, gain, cover,
  total_gain and total_cover (the feature's name when the DMatrix has names, else ``f3``);
- ``average_shap`` / ``full_shap``: SHAP contributions (``pred_contribs``) on the first
  ``shap_rows`` (500) rows of the validation data: the mean |contribution| per feature, and
  each feature's column plus ``full_shap/bias`` (a row's columns sum to its margin);
- ``predictions`` / ``labels``: of the validation data (what Confusion and ClassImbalance read),
  on at most 4096 rows and 64 KiB a round (:mod:`tensortap.xgboost._outcome`);
- ``trees``: the trees this round added, as columns ``trees/<column>`` of one row per node:
  tree, node, depth, feature (-1 for a leaf), threshold, gain, cover, leaf value.

Everything but the metrics is computed only on rounds when its collection is due.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import xgboost

from tensortap._hook import Hook as CoreHook
from tensortap._hook import HookOptions, OutDir
from tensortap.core._collections import CollectionKeys
from tensortap.core._modes import ModeKeys
from tensortap.core._save_config import SaveConfig
from tensortap.xgboost._outcome import OutcomeRows, bounded

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger(__name__)

HYPERPARAMETERS = "hyperparameters"
FEATURE_IMPORTANCE = "feature_importance"
AVERAGE_SHAP = "average_shap"
FULL_SHAP = "full_shap"
PREDICTIONS = "predictions"
LABELS = "labels"
TREES = "trees"
IMPORTANCE_TYPES = ("weight", "gain", "cover", "total_gain", "total_cover")
DEFAULT_COLLECTIONS = (CollectionKeys.METRICS, HYPERPARAMETERS, CollectionKeys.LOSSES)
_OWN_COLLECTIONS = (
    HYPERPARAMETERS,
    FEATURE_IMPORTANCE,
    AVERAGE_SHAP,
    FULL_SHAP,
    TREES,
    PREDICTIONS,
    LABELS,
)
TREE_COLUMNS = ("tree", "node", "depth", "feature", "threshold", "gain", "cover", "leaf")


class Hook(CoreHook, xgboost.callback.TrainingCallback):
    """Pass it in ``callbacks=[hook]`` to ``xgb.train`` or an XGBoost scikit-learn estimator.

    ``validation_data`` (a DMatrix, or ``(X, y)``) is what SHAP values, predictions and labels
    are computed on; SHAP values on its first ``shap_rows`` rows only (None: all), as exact
    SHAP costs rows x trees x leaves x depth. ``train_data`` is accepted for smdebug's
    signature. ``hyperparameters`` overrides the parameters read from the booster.
    """

    known_collections = (*CoreHook.known_collections, *_OWN_COLLECTIONS)
    framework = "xgboost"

    default_include_collections = DEFAULT_COLLECTIONS
    default_save_config = SaveConfig(save_interval=10)  # every 10 rounds, as smdebug's

    def __init__(
        self,
        out_dir: OutDir,
        *,
        hyperparameters: Mapping[str, Any] | None = None,
        train_data: Any = None,
        validation_data: Any = None,
        shap_rows: int | None = 500,
        **options: Unpack[HookOptions],
    ) -> None:
        CoreHook.__init__(self, out_dir, **options)
        xgboost.callback.TrainingCallback.__init__(self)
        for name in _OWN_COLLECTIONS:
            self.get_collection(name)
        self.hyperparameters = dict(hyperparameters or {})
        self.train_data = _as_dmatrix(train_data, "train_data")
        self.validation_data = _as_dmatrix(validation_data, "validation_data")
        if shap_rows is not None and (isinstance(shap_rows, bool) or shap_rows < 1):
            from tensortap.exceptions import InvalidConfigError

            raise InvalidConfigError(f"shap_rows must be an int >= 1 or None, got {shap_rows!r}")
        self.shap_rows = shap_rows
        self._shap_data: tuple[Any, Any] | None = None  # (validation data, its SHAP sample)
        self._outcome_rows = OutcomeRows()
        self._stop_now = False

    # -- TrainingCallback --
    def before_training(self, model: Any) -> Any:
        self._guard_event(self._begin, model)
        return model

    def after_iteration(self, model: Any, epoch: int, evals_log: Mapping[str, Any]) -> bool:
        with self._lock:
            if not self._closed:
                self._guard_event(self._save_round, model, evals_log)
        self.next_step()
        return self._stop_now

    def after_training(self, model: Any) -> Any:
        self.flush(timeout=0)
        return model

    def _check_stop(self) -> None:
        """A stop request ends boosting the XGBoost way: ``after_iteration`` returns True."""
        assert self._stop is not None
        reason = self._stop.requested()
        if reason is not None and not self._stop_now:
            logger.warning("tensortap: stopping boosting after round %d: %s", self.step - 1, reason)
            self._stop_now = True

    # -- saving --
    def _begin(self, model: Any) -> None:
        self._stop_now = False
        if self.mode != ModeKeys.TRAIN:
            self.set_mode(ModeKeys.TRAIN)
        params = {**_booster_params(model), **self.hyperparameters}
        for key, value in sorted(params.items()):
            number = _number(value)
            if number is not None:
                self._save_lazy(f"hyperparameters/{key}", [HYPERPARAMETERS], lambda n=number: n)

    def _due(self, collection: str) -> bool:
        recorder = self._recorder
        return recorder.is_collection_due(collection) or recorder.is_collection_due(
            CollectionKeys.ALL
        )

    def _save_round(self, model: Any, evals_log: Mapping[str, Any]) -> None:
        for data_name, metrics in evals_log.items():
            for metric, history in metrics.items():
                if len(history):
                    last = history[-1]
                    value = float(last[0] if isinstance(last, tuple) else last)  # cv: (mean, std)
                    self._save_lazy(
                        f"{data_name}-{metric}", [CollectionKeys.METRICS], lambda v=value: v
                    )
        if not self._recorder.is_anything_due():
            return
        features = _feature_names(model)
        if self._due(FEATURE_IMPORTANCE):
            for kind in IMPORTANCE_TYPES:
                for feature, score in model.get_score(importance_type=kind).items():
                    self._save_lazy(
                        f"feature_importance/{kind}/{feature}",
                        [FEATURE_IMPORTANCE],
                        lambda s=score: float(s),
                    )
        data = self.validation_data
        if data is not None and (self._due(AVERAGE_SHAP) or self._due(FULL_SHAP)):
            contribs = np.asarray(model.predict(self._shap_sample(data), pred_contribs=True))
            columns = contribs[..., :-1]  # the last column is the bias
            names = features or [f"f{i}" for i in range(columns.shape[-1])]
            for i, name in enumerate(names):
                column = columns[..., i]
                self._save_lazy(
                    f"average_shap/{name}",
                    [AVERAGE_SHAP],
                    lambda c=column: float(np.mean(np.abs(c))),
                )
                self._save_lazy(f"full_shap/{name}", [FULL_SHAP], lambda c=column: c)
            # with the bias, each row sums to the margin (the prediction before the link)
            self._save_lazy("full_shap/bias", [FULL_SHAP], lambda: contribs[..., -1])
        if data is not None and (self._due(PREDICTIONS) or self._due(LABELS)):
            sample = self._outcome_rows.sample(data)  # bounded (tensortap.xgboost._outcome)
            labels = np.asarray(sample.get_label())
            predicted, kept = bounded(
                np.asarray(model.predict(sample)), labels if labels.size else None
            )
            self._save_lazy("predictions", [PREDICTIONS], lambda: predicted)
            if kept is not None:
                self._save_lazy("labels", [LABELS], lambda: kept)
        if self._due(TREES):
            rounds = model.num_boosted_rounds()
            table = tree_table(model[rounds - 1 : rounds]) if rounds else None
            if table is not None:
                for key, values in table.items():
                    self._save_lazy(f"trees/{key}", [TREES], lambda v=values: v)

    def _shap_sample(self, data: Any) -> Any:
        """The first ``shap_rows`` rows of the validation data (the same rows every round):
        exact SHAP values cost time in proportion to rows x trees x leaves x depth."""
        if self.shap_rows is None or data.num_row() <= self.shap_rows:
            return data
        if self._shap_data is None or self._shap_data[0] is not data:
            self._shap_data = (data, data.slice(list(range(self.shap_rows))))
        return self._shap_data[1]


#: The open XGBoost hook made last in this process (see :meth:`tensortap._hook.Hook.current`).
get_hook = Hook.current


def tree_table(model: Any) -> dict[str, np.ndarray]:
    """Every node of ``model``'s trees as columns (see the module docstring)."""
    rows: list[tuple[float, ...]] = []
    for tree, dump in enumerate(model.get_dump(dump_format="json", with_stats=True)):
        stack = [json.loads(dump)]
        while stack:
            node = stack.pop()
            leaf = "leaf" in node
            split = node.get("split", -1)
            feature = int(split[1:]) if isinstance(split, str) and split[1:].isdigit() else -1
            rows.append(
                (
                    tree,
                    node.get("nodeid", -1),
                    node.get("depth", 0),
                    -1 if leaf else feature,
                    float(node.get("split_condition", np.nan)),
                    float(node.get("gain", np.nan)),
                    float(node.get("cover", np.nan)),
                    float(node["leaf"]) if leaf else np.nan,
                )
            )
            for child in node.get("children", []):
                child.setdefault("depth", node.get("depth", 0) + 1)
                stack.append(child)
    table = np.asarray(rows, dtype=np.float64).reshape(-1, len(TREE_COLUMNS))
    return {name: table[:, i] for i, name in enumerate(TREE_COLUMNS)}


def _booster_params(model: Any) -> dict[str, Any]:
    """The booster's training parameters, from its saved configuration."""
    try:
        learner = json.loads(model.save_config())["learner"]
    except Exception:
        return {}
    found: dict[str, Any] = {}
    booster = learner.get("gradient_booster", {})
    for section in (
        learner.get("generic_param"),
        learner.get("learner_train_param"),
        booster.get("gbtree_train_param"),
        booster.get("tree_train_param"),
        learner.get("objective", {}).get("reg_loss_param"),
    ):
        if isinstance(section, dict):
            found.update(section)
    return found


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if np.isfinite(number) else None


def _feature_names(model: Any) -> list[str] | None:
    names = getattr(model, "feature_names", None)
    return list(names) if names else None


def _as_dmatrix(data: Any, what: str) -> Any:
    if data is None or isinstance(data, xgboost.DMatrix):
        return data
    if isinstance(data, tuple) and len(data) == 2:
        return xgboost.DMatrix(data[0], label=data[1])
    from tensortap.exceptions import InvalidConfigError

    raise InvalidConfigError(
        f"{what} must be an xgboost.DMatrix or a tuple (X, y), got {type(data).__name__}"
    )
