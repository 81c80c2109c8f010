"""Embeddings over time (seed 004), drawn: :func:`plot_embeddings`, an animated plotly figure of
the frames that :mod:`tensortap.query._embeddings` computes (a slider and a play button; one trace
per label, so colours and the legend stay fixed). The numbers' names are re-exported here."""

from __future__ import annotations

from typing import Any

import numpy as np

from tensortap.exceptions import InvalidConfigError
from tensortap.query._embeddings import (
    METHODS,
    EmbeddingFrame,
    LiveEmbeddings,
    as_labels,
    embed,
    embeddings_over_time,
)
from tensortap.viz._plotly import as_text

try:
    import plotly.graph_objects as go
    from plotly.colors import qualitative
except ImportError as exc:  # pragma: no cover - plotly comes with tensortap[viz]
    raise InvalidConfigError("embedding plots need plotly: pip install 'tensortap[viz]'") from exc


def plot_embeddings(frames: list[EmbeddingFrame], title: str = "") -> Any:
    """An animated plotly figure of ``frames``: one scatter trace per label, a frame per step.
    It opens on the last frame (the model as trained so far), with the title and the slider
    both at that step; play runs from the first."""
    if not frames:
        raise InvalidConfigError("no frames to plot: the trial had no step with both tensors")
    classes = sorted({label.item() for f in frames for label in f.labels})
    palette = qualitative.Plotly if len(classes) <= 10 else qualitative.Dark24  # fixed per class
    everything = np.concatenate([f.points for f in frames])
    low, high = everything.min(axis=0), everything.max(axis=0)
    pad = (high - low) * 0.05 + 1e-9

    def traces(frame: EmbeddingFrame) -> list[Any]:
        return [
            go.Scatter(
                x=frame.points[frame.labels == c, 0],
                y=frame.points[frame.labels == c, 1],
                mode="markers",
                name=str(c),
                marker={"size": 7, "color": palette[i % len(palette)]},
            )
            for i, c in enumerate(classes)
        ]

    plotly_frames = [
        go.Frame(
            data=traces(f),
            name=str(f.step),
            layout={"title": {"text": f"{as_text(title or 'embedding')}: step {f.step}"}},
        )
        for f in frames
    ]
    shown = len(plotly_frames) - 1
    figure = go.Figure(data=plotly_frames[shown].data, frames=plotly_frames)
    animate = {"mode": "immediate", "frame": {"duration": 500, "redraw": True}}
    figure.update_layout(
        title={"text": plotly_frames[shown].layout.title.text},
        xaxis={"range": [low[0] - pad[0], high[0] + pad[0]], "showticklabels": False},
        yaxis={"range": [low[1] - pad[1], high[1] + pad[1]], "showticklabels": False},
        legend={"title": {"text": "label"}},
        height=600,
        updatemenus=[
            {
                "type": "buttons",
                "showactive": False,
                "x": 0,
                "y": -0.08,
                "xanchor": "left",
                "buttons": [
                    {
                        "label": "play",
                        "method": "animate",
                        "args": [None, {**animate, "fromcurrent": False}],
                    }
                ],
            }
        ],
        sliders=[
            {
                "active": shown,
                "x": 0.1,
                "len": 0.9,
                "currentvalue": {"prefix": "step "},
                "steps": [
                    {"label": f.name, "method": "animate", "args": [[f.name], animate]}
                    for f in plotly_frames
                ],
            }
        ],
    )
    return figure


__all__ = [
    "METHODS",
    "EmbeddingFrame",
    "LiveEmbeddings",
    "as_labels",
    "embed",
    "embeddings_over_time",
    "plot_embeddings",
]
