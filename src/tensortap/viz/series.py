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
    found = _from_series(trial, name, mode, reduction, len(steps))
    if found is not None:
        return found
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


def _from_series(
    trial: Trial, name: str, mode: Any, reduction: str, count: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """The tensor's one-element values, or its saved ``reduction``, from the series path when
    it holds one at every step (a few reads, whatever the run's length); None otherwise."""
    for statistic in ("value", reduction):
        cols = trial.series(name, statistic=statistic, mode=mode)
        if cols.rows == count:
            x = cols["step"] if mode is not None else cols["global_step"]
            order = np.argsort(x, kind="stable")
            return x[order].astype(np.int64), cols["value"][order]
    return None


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
    e.g. ``plot_tensors(trial, collection="losses", ylabel="Loss")``. Without ``mode``, each
    mode the tensor was saved in is its own line over global steps (TRAIN and EVAL are never
    joined into one); NaN and Inf are marked where they are, on the line's colour."""
    if collection is None and regex is None:
        raise InvalidConfigError("plot_tensors needs a collection or a regex of tensor names")
    names = sorted(trial.tensor_names(collection=collection, regex=regex, mode=mode))
    if not names:
        raise InvalidConfigError(
            f"no tensor matches collection={collection!r} regex={regex!r} in {trial.path}"
        )
    figure, ax = new_figure()
    modes = [mode] if mode is not None else trial.modes()
    for name in names:
        for each in modes:
            steps, values = tensor_series(trial, name, each, reduction)
            if not len(steps):
                continue
            label = name if len(modes) == 1 else f"{name} ({each.name})"
            if mode is None:  # one axis for every mode: global steps
                steps = np.asarray(trial.tensor(name).global_steps(each))
            (line,) = ax.plot(steps, values, label=label, marker="." if len(steps) < 40 else None)
            bad = ~np.isfinite(values)
            if bad.any():  # a NaN leaves a hole in a line: mark it at the axis' edge
                ax.plot(
                    steps[bad],
                    np.zeros(int(bad.sum())),
                    "x",
                    color=line.get_color(),
                    transform=ax.get_xaxis_transform(),
                    clip_on=False,
                    label=f"{label}: NaN/Inf",
                )
    ax.set_xlabel("global step" if mode is None else f"{str(mode).split('.')[-1].lower()} step")
    ax.set_ylabel(ylabel or (collection or regex or ""))
    if logy:
        ax.set_yscale("log")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small")
    ax.grid(alpha=0.3)
    return figure
