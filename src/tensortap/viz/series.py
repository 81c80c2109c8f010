"""Scalar series over steps: seed 000's ``plot_tensors``, without the notebook glue."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from tensortap.core.reductions import compute_reduction
from tensortap.exceptions import InvalidConfigError
from tensortap.trials.trial import Trial
from tensortap.viz._figure import new_figure


def tensor_series(
    trial: Trial, name: str, mode: Any = None, reduction: str = "mean"
) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of one tensor: its value where it has one element, else ``reduction``
    of it (the saved reduction where the hook saved only that)."""
    tensor = trial.tensor(name)
    steps = tensor.steps(mode=mode)
    saved = tensor.values(mode=mode)  # every raw value, fetched together
    values = []
    for step in steps:
        value = saved.get(step)
        if value is None:  # only reductions were saved
            values.append(float(tensor.reduction_value(step, reduction, mode=mode)))
            continue
        flat = value.reshape(-1)
        values.append(float(flat[0]) if flat.size == 1 else compute_reduction(flat, reduction))
    return np.asarray(steps, dtype=np.int64), np.asarray(values, dtype=np.float64)


def plot_tensors(
    trial: Trial,
    collection: str | None = None,
    regex: str | None = None,
    mode: Any = None,
    reduction: str = "mean",
    ylabel: str = "",
    logy: bool = False,
) -> Figure:
    """Every tensor of ``collection`` (and/or matching ``regex``) over steps, one line each,
    e.g. ``plot_tensors(trial, collection="losses", ylabel="Loss")``."""
    if collection is None and regex is None:
        raise InvalidConfigError("plot_tensors needs a collection or a regex of tensor names")
    names = sorted(trial.tensor_names(collection=collection, regex=regex, mode=mode))
    if not names:
        raise InvalidConfigError(
            f"no tensor matches collection={collection!r} regex={regex!r} in {trial.path}"
        )
    figure, ax = new_figure()
    for name in names:
        steps, values = tensor_series(trial, name, mode, reduction)
        ax.plot(steps, values, label=name)
    ax.set_xlabel("step" if mode is None else f"{str(mode).split('.')[-1].lower()} step")
    ax.set_ylabel(ylabel or (collection or regex or ""))
    if logy:
        ax.set_yscale("log")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small")
    ax.grid(alpha=0.3)
    return figure
