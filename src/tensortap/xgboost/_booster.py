"""What the XGBoost hook reads from a booster: its trees as columns, its feature importances,
its training parameters (:mod:`tensortap.xgboost._hook` saves them)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

TREE_COLUMNS = ("tree", "node", "depth", "feature", "threshold", "gain", "cover", "leaf")


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


def importances(model: Any) -> dict[str, dict[str, float]]:
    """``Booster.get_score`` of every importance type, in three calls of the five: XGBoost's
    ``gain`` and ``cover`` are the means over a feature's splits (``weight`` of them), so the
    totals are their products (equal to ``get_score``'s within float rounding)."""
    weight = model.get_score(importance_type="weight")
    gain = model.get_score(importance_type="gain")
    cover = model.get_score(importance_type="cover")

    def total(mean: Mapping[str, Any]) -> dict[str, float]:
        return {f: float(np.float64(v) * weight[f]) for f, v in mean.items() if f in weight}

    found = {"weight": weight, "gain": gain, "cover": cover}
    if all(isinstance(v, float | int) for v in (*gain.values(), *cover.values())):
        found.update(total_gain=total(gain), total_cover=total(cover))
    else:  # a vector per feature (multi-output): ask XGBoost
        for kind in ("total_gain", "total_cover"):
            found[kind] = model.get_score(importance_type=kind)
    return found


def booster_params(model: Any) -> dict[str, Any]:
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


def finite_number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if np.isfinite(number) else None


def feature_names(model: Any) -> list[str] | None:
    names = getattr(model, "feature_names", None)
    return list(names) if names else None
