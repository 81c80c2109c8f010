"""An HTML report of an XGBoost trial: what every boosting round did, in one self-contained page.

Sections: metric curves per metric (every eval set), feature importance over rounds, the SHAP
summary, the confusion matrix of the last saved predictions, tree depth over rounds, and what
the rules for boosted trees found. The page has no script and loads nothing: charts are inline
SVG, so it opens offline and can be mailed as one file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from tensortap.report._page import evaluate_rules, page, rule_rows, section
from tensortap.report._svg import bar_chart, line_chart
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import training_and_validation
from tensortap.rules.builtin._labels import as_classes
from tensortap.rules.builtin.tree_depth import depth_per_tree
from tensortap.trials._trial import Trial, create_trial


def _values(trial: Trial, name: str) -> tuple[list[int], list[float]]:
    tensor = trial.tensor(name)
    steps = tensor.steps()
    return steps, [float(np.mean(tensor.value(s))) for s in steps]


def _metric_charts(trial: Trial) -> str:
    by_metric: dict[str, dict[str, tuple[list[int], list[float]]]] = {}
    for name in trial.tensor_names(collection="metrics"):
        data, _, metric = name.rpartition("-")
        by_metric.setdefault(metric or name, {})[data or name] = _values(trial, name)
    charts = [line_chart(series, metric, "boosting round") for metric, series in by_metric.items()]
    return "".join(charts) or "<p>No metrics saved.</p>"


def _importance(trial: Trial) -> str:
    names = trial.tensor_names(collection="feature_importance")
    kinds = sorted({n.split("/")[1] for n in names if n.count("/") >= 2})
    kind = "gain" if "gain" in kinds else (kinds[0] if kinds else None)
    if kind is None:
        return "<p>No feature importance saved.</p>"
    prefix = f"feature_importance/{kind}/"
    series = {n[len(prefix) :]: _values(trial, n) for n in names if n.startswith(prefix)}
    last = {f: ys[-1] for f, (_, ys) in series.items() if ys}
    top = sorted(last, key=last.__getitem__, reverse=True)[:8]
    return line_chart(
        {f: series[f] for f in top},
        f"importance ({kind}), top {len(top)} features",
        "boosting round",
    ) + bar_chart(
        dict(sorted(last.items(), key=lambda kv: -kv[1])[:15]), f"{kind} at the last save"
    )


def _shap(trial: Trial) -> str:
    names = trial.tensor_names(collection="average_shap")
    if not names:
        return "<p>No SHAP values saved (include average_shap and give validation_data).</p>"
    last = {n.split("/", 1)[1]: _values(trial, n)[1][-1] for n in names}
    top = dict(sorted(last.items(), key=lambda kv: -kv[1])[:15])
    return bar_chart(top, "mean |SHAP value| on the validation data, last save")


def _confusion(trial: Trial) -> str:
    if not (trial.has_tensor("labels") and trial.has_tensor("predictions")):
        return "<p>No labels and predictions saved.</p>"
    step = trial.tensor("predictions").steps()[-1]
    y, p = as_classes(trial.tensor("labels").value(step), trial.tensor("predictions").value(step))
    if p.shape != y.shape or not y.size or y.min() < 0 or max(y.max(), p.max()) > 100:
        return "<p>The predictions are not classes (a regression?): no confusion matrix.</p>"
    n = int(max(y.max(), p.max())) + 1
    matrix = np.zeros((n, n), dtype=np.int64)
    np.add.at(matrix, (y, p), 1)
    head = "".join(f"<th>predicted {j}</th>" for j in range(n))
    rows = "".join(
        f"<tr><th>label {i}</th>" + "".join(f"<td>{matrix[i, j]}</td>" for j in range(n)) + "</tr>"
        for i in range(n)
    )
    accuracy = float(np.trace(matrix)) / max(1, int(matrix.sum()))
    return (
        f"<p>Validation data at round {step}: accuracy {accuracy:.3f}.</p>"
        f"<table><tr><th></th>{head}</tr>{rows}</table>"
    )


def _tree_depth(trial: Trial) -> str:
    if not (trial.has_tensor("trees/tree") and trial.has_tensor("trees/depth")):
        return "<p>No trees saved (include the trees collection).</p>"
    steps, deepest, median = [], [], []
    for step in trial.tensor("trees/depth").steps():
        per_tree = depth_per_tree(
            trial.tensor("trees/tree").value(step), trial.tensor("trees/depth").value(step)
        )
        steps.append(step)
        deepest.append(float(max(per_tree)))
        median.append(float(np.median(per_tree)))
    return line_chart(
        {"deepest tree": (steps, deepest), "median tree": (steps, median)},
        "tree depth",
        "boosting round",
    )


def _rules(trial: Trial) -> list[Rule]:
    from tensortap.rules.builtin import (
        ClassImbalance,
        Confusion,
        FeatureImportanceOverweight,
        Overfit,
        TreeDepth,
    )

    rules: list[Rule] = [FeatureImportanceOverweight(trial), TreeDepth(trial)]
    if trial.has_tensor("labels") and trial.has_tensor("predictions"):
        rules += [ClassImbalance(trial), Confusion(trial)]  # on XGBoost trials, TRAIN steps
    pair = training_and_validation(trial.tensor_names(collection="metrics"))
    if pair is not None:
        training, validation = (f"^{re.escape(name)}$" for name in pair)
        rules.append(Overfit(trial, training_metric=training, validation_metric=validation))
    return rules


def _findings(trial: Trial) -> str:
    if not trial.steps():
        return "<p>No steps saved.</p>"
    return rule_rows(evaluate_rules(trial, _rules(trial)), link_steps=False)


def xgboost_report(
    trial: Trial | str | os.PathLike[str], title: str | None = None, location: str | None = None
) -> str:
    """The report of an XGBoost trial as one HTML page (see the module docstring); ``location``
    names where the trial is (see :func:`~tensortap.report._page.page`)."""
    if not isinstance(trial, Trial):
        trial = create_trial(trial)
    heading = title or f"XGBoost report: {trial.name}"
    sections = [
        section("Metrics", _metric_charts, trial),
        section("Feature importance", _importance, trial),
        section("SHAP", _shap, trial),
        section("Confusion matrix", _confusion, trial),
        section("Tree depth", _tree_depth, trial),
        section("Rule findings", _findings, trial),
    ]
    return page(heading, trial, "rounds", sections, location)


def write_xgboost_report(
    trial: Trial | str | os.PathLike[str],
    out: str | os.PathLike[str],
    title: str | None = None,
    location: str | None = None,
) -> Path:
    """Write the report to ``out`` (an .html file); returns its path."""
    path = Path(out)
    path.write_text(xgboost_report(trial, title, location), encoding="utf-8")
    return path


__all__ = ["write_xgboost_report", "xgboost_report"]
