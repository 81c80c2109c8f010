"""Scalar series over steps: seed 000's ``plot_tensors``, without the notebook glue (the
numbers from :mod:`tensortap.query._curves`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from tensortap.exceptions import InvalidConfigError
from tensortap.query._curves import mode_lines, tensor_series
from tensortap.trials._trial import Trial
from tensortap.viz._figure import new_figure


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
    for label, (steps, values) in mode_lines(trial, names, mode, reduction).items():
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


__all__ = ["plot_tensors", "tensor_series"]
