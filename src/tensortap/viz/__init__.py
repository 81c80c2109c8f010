"""Plots of a trial. Needs ``pip install tensortap[viz]``.

- Static plots (matplotlib, headless-safe: figures are built without pyplot, so no display is
  needed) return a :class:`matplotlib.figure.Figure`; save it with ``fig.savefig("plot.png")``.
- Interactive ones (plotly): :class:`TensorPlot` and :func:`plot_embeddings` (with
  :class:`LiveEmbeddings` to follow a running trial) return plotly figures; ``write_html``
  gives a page that opens offline."""

from tensortap.viz._distributions import plot_distribution
from tensortap.viz._embeddings import (
    EmbeddingFrame,
    LiveEmbeddings,
    embeddings_over_time,
    plot_embeddings,
)
from tensortap.viz._health import plot_layer_health
from tensortap.viz._series import plot_tensors, tensor_series
from tensortap.viz._tensor_plot import TensorPlot

__all__ = [
    "EmbeddingFrame",
    "LiveEmbeddings",
    "TensorPlot",
    "embeddings_over_time",
    "plot_distribution",
    "plot_embeddings",
    "plot_layer_health",
    "plot_tensors",
    "tensor_series",
]
