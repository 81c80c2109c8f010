"""How one tensor's values are distributed, step after step: quantile bands or a heat map of
histograms (what a person looks at to see weights collapse or gradients vanish)."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from tensortap.exceptions import InvalidConfigError
from tensortap.query._distributions import QUANTILES, distribution_data
from tensortap.trials._trial import Trial
from tensortap.viz._figure import new_figure


def plot_distribution(
    trial: Trial, name: str, mode: Any = None, kind: str = "quantiles", bins: int = 50
) -> Figure:
    """``kind="quantiles"``: the median and the 25-75 % and 5-95 % bands over steps;
    ``kind="heatmap"``: one histogram per step, counts on a log colour scale."""
    if kind not in ("quantiles", "heatmap"):
        raise InvalidConfigError(f"kind must be 'quantiles' or 'heatmap', got {kind!r}")
    data = distribution_data(trial, name, mode, bins)
    steps, q = data["steps"], data["quantiles"]
    figure, ax = new_figure()
    if kind == "quantiles":
        ax.fill_between(steps, q[:, 0], q[:, 4], alpha=0.2, label="5-95 %")
        ax.fill_between(steps, q[:, 1], q[:, 3], alpha=0.4, label="25-75 %")
        ax.plot(steps, q[:, 2], label="median")
        ax.legend(loc="upper left", fontsize="small")
    else:
        edges = data["edges"]
        image = ax.imshow(
            np.log1p(data["histograms"].T),
            aspect="auto",
            origin="lower",
            extent=(float(steps[0]) - 0.5, float(steps[-1]) + 0.5, edges[0], edges[-1]),
            cmap="viridis",
        )
        figure.colorbar(image, ax=ax, label="log(1 + count)")
    ax.set_title(name)
    ax.set_xlabel("step")
    ax.set_ylabel("value")
    return figure


__all__ = ["QUANTILES", "distribution_data", "plot_distribution"]
