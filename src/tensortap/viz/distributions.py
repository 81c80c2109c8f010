"""How one tensor's values are distributed, step after step: quantile bands or a heat map of
histograms (what a person looks at to see weights collapse or gradients vanish)."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from tensortap.exceptions import InvalidConfigError
from tensortap.trials.trial import Trial
from tensortap.viz._figure import new_figure

QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def distribution_data(
    trial: Trial, name: str, mode: Any = None, bins: int = 50
) -> dict[str, np.ndarray]:
    """The numbers behind :func:`plot_distribution`: ``steps``, ``quantiles`` (steps x 5, at
    QUANTILES) and ``histograms`` (steps x bins over the common range ``edges``), of the
    finite values of every step where the raw tensor was saved."""
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise InvalidConfigError(f"bins must be an int >= 1, got {bins!r}")
    values = trial.tensor(name).values(mode=mode)
    steps = sorted(s for s, v in values.items() if np.isfinite(v).any())
    if not steps:
        raise InvalidConfigError(
            f"{name!r} has no raw values with finite numbers to plot (save the raw tensor, not "
            "only reductions)"
        )
    finite = [v[np.isfinite(v)].astype(np.float64).reshape(-1) for v in (values[s] for s in steps)]
    low = min(float(f.min()) for f in finite)
    high = max(float(f.max()) for f in finite)
    edges = np.linspace(low, high if high > low else low + 1.0, bins + 1)
    return {
        "steps": np.asarray(steps, dtype=np.int64),
        "quantiles": np.asarray([np.quantile(f, QUANTILES) for f in finite]),
        "histograms": np.asarray([np.histogram(f, bins=edges)[0] for f in finite]),
        "edges": edges,
    }


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
