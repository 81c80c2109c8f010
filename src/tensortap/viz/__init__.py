"""Plots of a trial (matplotlib, headless-safe: figures are built without pyplot, so no display
is needed). Every function returns a :class:`matplotlib.figure.Figure`; save it with
``fig.savefig("plot.png")`` (or ``.svg``). Needs ``pip install tensortap[viz]``."""

from tensortap.viz.distributions import plot_distribution
from tensortap.viz.health import plot_layer_health
from tensortap.viz.series import plot_tensors, tensor_series
from tensortap.viz.tensor_plot import TensorPlot

__all__ = ["TensorPlot", "plot_distribution", "plot_layer_health", "plot_tensors", "tensor_series"]
