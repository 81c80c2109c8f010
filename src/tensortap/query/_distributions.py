"""How one tensor's values are distributed, step after step, as numbers: quantiles and
histograms over a common range (what ``viz.plot_distribution`` draws)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tensortap.exceptions import InvalidConfigError
from tensortap.trials._trial import Trial

QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def distribution_data(
    trial: Trial, name: str, mode: Any = None, bins: int = 50
) -> dict[str, np.ndarray]:
    """``steps``, ``quantiles`` (steps x 5, at QUANTILES) and ``histograms`` (steps x bins
    over the common range ``edges``), of the finite values of every step where the raw tensor
    was saved."""
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


__all__ = ["QUANTILES", "distribution_data"]
