"""What the XGBoost hook learns of the run's configuration (``trial.config()``): the booster's
parameters as it trains with them (defaults included) and its learning rate (``eta``); under
zero code change also ``xgb.train``'s own arguments (the parameters as the script gave them,
the number of rounds, the names of ``evals``) and the training rows. XGBoost fits each round
on the whole training set, so ``batch_size`` is the training data's row count."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def booster_config(params: Mapping[str, Any]) -> dict[str, Any]:
    """``{"trainer": {"booster_params"}, "learning_rate"}`` from the booster's parameters
    (strings, as its saved configuration holds them)."""
    found: dict[str, Any] = {"trainer": {"booster_params": dict(params)}}
    rate = _rate(params.get("eta", params.get("learning_rate")))
    if rate is not None:
        found["learning_rate"] = rate
    return found


def train_call_config(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``xgb.train``'s arguments: ``{"trainer": {"class", "params", "num_boost_round",
    "evals"}, "batch_size"}``."""
    params = arguments.get("params")
    given = dict(params) if isinstance(params, Mapping) else {}
    trainer: dict[str, Any] = {"class": "xgboost.train", "params": given}
    rounds = arguments.get("num_boost_round")
    if isinstance(rounds, int):
        trainer["num_boost_round"] = rounds
    evals = arguments.get("evals") or ()
    trainer["evals"] = [str(name) for _, name in evals]
    found: dict[str, Any] = {"trainer": trainer}
    dtrain = arguments.get("dtrain")
    num_row = getattr(dtrain, "num_row", None)
    if callable(num_row):
        found["batch_size"] = int(num_row())
    return found


def _rate(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return float(f"{number:.7g}")  # the booster keeps it as float32 text: 0.300000012
