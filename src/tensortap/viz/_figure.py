"""A figure without pyplot (no GUI backend, safe in threads and on servers)."""

from __future__ import annotations

from typing import Any

from tensortap.exceptions import InvalidConfigError

try:
    from matplotlib.figure import Figure
except ImportError as exc:  # pragma: no cover - matplotlib comes with tensortap[viz]
    raise InvalidConfigError("plots need matplotlib: pip install 'tensortap[viz]'") from exc


def new_figure(rows: int = 1, width: float = 8.0, height: float = 4.5) -> tuple[Figure, Any]:
    """A figure with ``rows`` axes stacked vertically (one Axes, or an array of them)."""
    figure = Figure(figsize=(width, height * rows), layout="constrained")
    axes = figure.subplots(rows, 1, squeeze=True)
    return figure, axes
