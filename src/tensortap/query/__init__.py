"""The numbers behind every picture, computed once and drawn by many: plain functions of a
trial (or of its series) that answer NumPy arrays and plain data, never a figure. ``viz``
(matplotlib, plotly), the dashboard (``serve``, JSON for its page) and the report (inline SVG)
only draw what these answer. Imports trials and core only; no plotting library."""

from tensortap.query._curves import LINE_BUCKETS, mode_lines, read_series, tensor_series
from tensortap.query._distributions import QUANTILES, distribution_data
from tensortap.query._embeddings import (
    EmbeddingFrame,
    LiveEmbeddings,
    embed,
    embeddings_over_time,
)
from tensortap.query._health import (
    HEAT_COLUMNS,
    heat_width,
    layer_health,
    layer_names,
    layer_order,
    norm_buckets,
    spread,
    step_health,
)
from tensortap.query._layer_diff import LayerDiff, StatisticDiff, layer_diff

__all__ = [
    "HEAT_COLUMNS",
    "LINE_BUCKETS",
    "QUANTILES",
    "EmbeddingFrame",
    "LayerDiff",
    "LiveEmbeddings",
    "StatisticDiff",
    "distribution_data",
    "embed",
    "embeddings_over_time",
    "heat_width",
    "layer_diff",
    "layer_health",
    "layer_names",
    "layer_order",
    "mode_lines",
    "norm_buckets",
    "read_series",
    "spread",
    "step_health",
    "tensor_series",
]
