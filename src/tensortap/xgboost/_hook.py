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
  on at most 4096 rows and 64 KiB a round (:mod:`tensortap.xgboost._outcome`); a round where
  the script saved ``labels`` or ``predictions`` itself (``hook.save_tensor``, in a callback
  before the hook's) keeps the script's;
- ``trees``: the trees this round added, as columns ``trees/<column>`` of one row per node:
  tree, node, depth, feature (-1 for a leaf), threshold, gain, cover, leaf value.

Everything but the metrics is computed only on rounds when its collection is due.

Every round, whatever the schedule, the ``vitals`` collection (when included: by default, and in
every job) holds ``vitals/loss``, the training set's first loss metric (``train-logloss``; an
error rate is no loss: :mod:`tensortap.core._metric_kinds`), and ``vitals/step_time``, the
seconds since the previous round ended. A round that saves nothing else is gathered (its end
time and loss kept) and saved, as its own step with the same values, with the next round that
saves more, or at most :data:`GATHER_ROUNDS` rounds or :data:`GATHER_SECS` seconds later, or
before the script saves anything or reads the step: the same work, run warm in a row rather
than between two of XGBoost's rounds (docs/benchmarks.md, XGBoost zero code change).

The eval sets are saved under the names XGBoost gives them, but for the training data: the set
that is the training DMatrix (the very object, or one with its shape and labels) is saved as
``train``, whatever it is called (``XGBClassifier.fit(eval_set=[(X, y), (X_valid, y_valid)])``
calls it ``validation_0``), unless another set is already called ``train``. The hook learns the
sets from the ``xgb.train`` call under zero code change (:meth:`Hook.name_eval_sets`).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import xgboost

from tensortap.core._collections import CollectionKeys
from tensortap.core._metric_kinds import is_loss_metric
from tensortap.core._modes import ModeKeys
from tensortap.core._outcome import OUTCOME_NAMES
from tensortap.core._save_config import SaveConfig
from tensortap.core._vitals import VITALS, Vital
from tensortap.hook._hook import Hook as CoreHook
from tensortap.hook._hook import HookOptions, OutDir
from tensortap.xgboost._booster import (
    booster_params,
    feature_names,
    finite_number,
    importances,
    tree_table,
)
from tensortap.xgboost._config import booster_config
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
_VITALS = (VITALS,)
_METRICS = (CollectionKeys.METRICS,)
_FEATURE_IMPORTANCE = (FEATURE_IMPORTANCE,)
#: A round that saves nothing but its vital signs is gathered: its end time and training loss
#: are kept, and it is saved (as its own step, values unchanged) with the next round that
#: saves more, or once this many are gathered, or :data:`GATHER_SECS` after the last round
#: saved. Saved as each round ends, the hook's Python runs between two of XGBoost's rounds
#: with the CPU caches cold (65 us of CPU a round inside ``xgb.train``, 13 us in a tight loop,
#: on 0.7 ms rounds); gathered, it runs warm (docs/benchmarks.md, XGBoost zero code change).
GATHER_ROUNDS = 32
GATHER_SECS = 0.1


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
        self._set_names: dict[str, str] = {}  # XGBoost's name of an eval set -> the saved one
        self._round_ended: float | None = None  # when the previous round ended (perf_counter)
        # (the evals_log of this training, the training loss's history in it: a list XGBoost
        # appends to), found on the first round of each training
        self._loss_history: tuple[Mapping[str, Any], list[Any] | None] | None = None
        # the rounds gathered: (when each ended, its training loss as logged), saved with the
        # next round that saves more (see GATHER_ROUNDS)
        self._gathered: list[tuple[float, Any]] = []
        self._gather_before = 0  # rounds (mode steps) before this one may be gathered
        self._gather_until = 0.0  # ... while they end before this (perf_counter)
        self._gather_version = -1  # ... and the collections are those planned with

    def name_eval_sets(self, dtrain: Any, evals: Sequence[tuple[Any, str]] | None) -> None:
        """Learn which of ``evals`` (``xgb.train``'s) is the training data ``dtrain``: its
        metrics are saved as ``train-<metric>`` (see the module docstring)."""
        self._set_names = eval_set_names(dtrain, evals or ())

    # -- TrainingCallback --
    def before_training(self, model: Any) -> Any:
        self._guard_event(self._begin, model)
        self._round_ended = time.perf_counter()
        return model

    def after_iteration(self, model: Any, epoch: int, evals_log: Mapping[str, Any]) -> bool:
        now = time.perf_counter()
        with self._lock:  # one lock for the round and its step's end (next_step's)
            if self._may_gather(evals_log, now):
                history = self._loss_history[1] if self._loss_history is not None else None
                self._gathered.append((now, history[-1] if history else None))
            elif not self._closed:
                self._guard_event(self._save_gathered)
                self._guard_event(self._save_round, model, evals_log, now)
                self._guard(self._recorder.next_step)
                self._guard_event(self._plan_gathering, now)
        return self._stop_now

    def after_training(self, model: Any) -> Any:
        self.flush_at_end()  # a trial opened after xgb.train holds every round
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
        params = {**booster_params(model), **self.hyperparameters}
        self.gather_config(partial(booster_config, params))
        for key, value in sorted(params.items()):
            number = finite_number(value)
            if number is not None:
                self._save_lazy(f"hyperparameters/{key}", [HYPERPARAMETERS], lambda n=number: n)

    def _due(self, collection: str) -> bool:
        recorder = self._recorder
        return recorder.is_collection_due(collection) or recorder.is_collection_due(
            CollectionKeys.ALL
        )

    def _save_round(self, model: Any, evals_log: Mapping[str, Any], now: float) -> None:
        due = self._recorder.is_anything_due()  # the vital signs aside
        if due or self._loss_history is None or self._loss_history[0] is not evals_log:
            self._save_metrics(evals_log)  # also finds the training loss's history
        history = self._loss_history[1] if self._loss_history is not None else None
        self._save_vitals_of_round(history[-1] if history else None, now)
        if due:
            self._save_due(model)

    def _save_vitals_of_round(self, last: Any, ended: float) -> None:
        """A round's vital signs: its training loss (``last``, as XGBoost logged it) and the
        seconds since the previous round ended; through the recorder's path for a float."""
        recorder = self._recorder
        started, self._round_ended = self._round_ended, ended
        if last is not None:
            loss = float(last[0] if isinstance(last, tuple) else last)  # cv: (mean, std)
            recorder.record(Vital.LOSS, loss, _VITALS)
        if started is not None:
            recorder.record(Vital.STEP_TIME, ended - started, _VITALS)

    # -- gathering the rounds that save only their vital signs --
    def _may_gather(self, evals_log: Mapping[str, Any], now: float) -> bool:
        """Whether this round only joins the rounds gathered: nothing but its vital signs is
        due (as planned at the last round saved, the collections unchanged since), fewer than
        :data:`GATHER_ROUNDS` are gathered, and the last round saved ended less than
        :data:`GATHER_SECS` ago."""
        gathered = self._gathered
        recorder = self._recorder
        return (
            not self._closed
            and recorder.mode_step + len(gathered) < self._gather_before
            and len(gathered) < GATHER_ROUNDS
            and now < self._gather_until
            and recorder.collections.version == self._gather_version
            and self._loss_history is not None
            and self._loss_history[0] is evals_log
        )

    def _plan_gathering(self, now: float) -> None:
        """After a round saved: which of the next rounds may be gathered (those before the
        next one where a collection other than the vital signs is due), and until when."""
        recorder = self._recorder
        configs = {
            id(config): config
            for name in recorder.include_collections
            if name != VITALS
            for config in [recorder.collections.get(name).save_config or recorder.save_config]
        }
        step = recorder.mode_step
        last = step + GATHER_ROUNDS
        while step < last and not any(c.should_save(recorder.mode, step) for c in configs.values()):
            step += 1
        self._gather_before = step
        self._gather_until = now + GATHER_SECS
        self._gather_version = recorder.collections.version

    def _save_gathered(self) -> None:
        """Save the rounds gathered, each as its own step (under the hook's lock), in one
        block (one recorder pass, one writer submission) when there are several."""
        gathered, self._gathered = self._gathered, []
        recorder = self._recorder
        if len(gathered) < 2:
            for ended, last in gathered:
                self._save_vitals_of_round(last, ended)
                recorder.next_step()
            return
        values = np.full((len(gathered), 2), np.nan)  # as _save_vitals_of_round saves them
        kept = np.zeros(values.shape, dtype=bool)
        started = self._round_ended
        for i, (ended, last) in enumerate(gathered):
            if last is not None:
                values[i, 0] = float(last[0] if isinstance(last, tuple) else last)
                kept[i, 0] = True
            if started is not None:
                values[i, 1] = ended - started
                kept[i, 1] = True
            started = ended
        self._round_ended = started
        first = recorder.mode_step
        recorder.publish_scalar_steps(
            range(first, first + len(gathered)),
            {Vital.LOSS: values[:, 0], Vital.STEP_TIME: values[:, 1]},
            _VITALS,
            kept=kept,
        )

    def _catch_up(self) -> None:
        """Before anything that reads or moves the step: save the rounds gathered."""
        if self._gathered:
            with self._lock:
                if not self._closed:
                    self._guard_event(self._save_gathered)

    @property
    def step(self) -> int:
        """The current global step (the rounds gathered counted)."""
        self._catch_up()
        return super().step

    @property
    def mode_step(self) -> int:
        """The current step within the current mode (the rounds gathered counted)."""
        self._catch_up()
        return super().mode_step

    def _save_metrics(self, evals_log: Mapping[str, Any]) -> None:
        """Every metric of every eval set (where due), and where the training loss's history
        is in ``evals_log`` (XGBoost appends each round's value to the same list)."""
        loss: list[Any] | None = None
        for data_name, metrics in evals_log.items():
            name = self._set_names.get(data_name, data_name)
            for metric, history in metrics.items():
                if len(history):
                    last = history[-1]
                    value = float(last[0] if isinstance(last, tuple) else last)  # cv: (mean, std)
                    self._recorder.record(f"{name}-{metric}", value, _METRICS)
                    if loss is None and name == "train" and is_loss_metric(metric):
                        loss = history
        self._loss_history = (evals_log, loss)

    def _save_due(self, model: Any) -> None:
        """What is saved on rounds its collections are due: importance, SHAP values, the
        outcome, the round's trees."""
        with self._saving():  # what the save budget measures (the outcome too)
            self._save_scores(model)
            self._save_outcome(model)

    def _save_outcome(self, model: Any) -> None:
        """A due round's outcome: the booster's predictions on a bounded sample of the
        evaluation set, and its labels (unless the script saved its own)."""
        data = self.validation_data
        own = any(self._recorder.has_saved(n) for n in OUTCOME_NAMES)  # the script's win
        if data is not None and not own and (self._due(PREDICTIONS) or self._due(LABELS)):
            sample = self._outcome_rows.sample(data)  # bounded (tensortap.xgboost._outcome)
            labels = self._outcome_rows.labels(sample)
            predicted, kept = bounded(
                np.asarray(model.predict(sample)), labels if labels.size else None
            )
            self._save_lazy("predictions", [PREDICTIONS], lambda: predicted)
            if kept is not None:
                self._save_lazy("labels", [LABELS], lambda: kept)

    def _save_scores(self, model: Any) -> None:
        """A due round's importance, SHAP values and tree."""
        features = feature_names(model)
        if self._due(FEATURE_IMPORTANCE):
            recorder = self._recorder
            for kind, scores in importances(model).items():
                for feature, score in scores.items():
                    # one number per feature (a vector of them for a multi-output booster)
                    value = float(score) if isinstance(score, float | int) else score
                    name = f"feature_importance/{kind}/{feature}"
                    recorder.record(name, value, _FEATURE_IMPORTANCE)
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


def eval_set_names(dtrain: Any, evals: Sequence[tuple[Any, str]]) -> dict[str, str]:
    """``{XGBoost's name: "train"}`` for the eval set that is the training data: ``dtrain``
    itself (what ``XGBClassifier.fit`` passes when ``eval_set`` holds the very ``(X, y)`` it
    fits), else the first one with its rows, columns and labels; nothing when a set is already
    called ``train``, or none is the training data."""
    names = [name for _, name in evals]
    if dtrain is None or "train" in names:
        return {}
    for data, name in evals:
        if data is dtrain:
            return {name: "train"}
    for data, name in evals:
        if _same_data(data, dtrain):
            return {name: "train"}
    return {}


def _same_data(a: Any, b: Any) -> bool:
    """Whether two DMatrix hold (as far as a cheap look tells) the same rows: their shapes and
    labels are equal."""
    try:
        if (a.num_row(), a.num_col()) != (b.num_row(), b.num_col()):
            return False
        return bool(np.array_equal(a.get_label(), b.get_label()))
    except Exception:  # not a DMatrix, or one that cannot say
        return False


def _caught_up(method: Any) -> Any:
    """``method`` of the core hook, after the rounds gathered are saved (it reads or moves
    the step, or saves in it)."""

    @functools.wraps(method)
    def caught_up(self: Hook, *args: Any, **kwargs: Any) -> Any:
        self._catch_up()
        return method(self, *args, **kwargs)

    return caught_up


for _name in (
    "save_tensor",
    "save_vitals",
    "record_event",
    "set_mode",
    "next_step",
    "continue_at",
    "flush",
    "close",
):
    setattr(Hook, _name, _caught_up(getattr(CoreHook, _name)))


#: The open XGBoost hook made last in this process (see :meth:`tensortap.hook._hook.Hook.current`).
get_hook = Hook.current


def _as_dmatrix(data: Any, what: str) -> Any:
    if data is None or isinstance(data, xgboost.DMatrix):
        return data
    if isinstance(data, tuple) and len(data) == 2:
        return xgboost.DMatrix(data[0], label=data[1])
    from tensortap.exceptions import InvalidConfigError

    raise InvalidConfigError(
        f"{what} must be an xgboost.DMatrix or a tuple (X, y), got {type(data).__name__}"
    )
