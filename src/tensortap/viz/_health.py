"""Per-layer health over time: the gradient norm of every layer and the share of zero
activations, as heat maps (layers x steps), to see vanishing gradients or dead units at once."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from tensortap.query._health import layer_health, layer_order
from tensortap.trials._trial import Trial
from tensortap.viz._figure import new_figure


def plot_layer_health(
    trial: Trial,
    gradients: str = "gradients",
    activations: str = "relu_activations",
    steps: list[int] | None = None,
) -> Figure:
    """Heat maps of log10 gradient norm per layer (an exact zero, a dead layer, in black) and
    of the share of zero activations per layer on an absolute 0-100 % scale, over steps (a
    panel is left out when its collection was not saved)."""
    import matplotlib as mpl

    data = layer_health(trial, gradients, activations, steps)
    with np.errstate(divide="ignore"):
        logs = np.log10(data["gradient_norms"])
    finite = logs[np.isfinite(logs)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    logs[logs == -np.inf] = low - 1.0  # below the scale: drawn in the "under" colour
    panels = [
        (data["gradient_names"], logs, "log10 ‖gradient‖ (black: exactly 0)", "magma", low, high),
        (
            data["activation_names"],
            data["zero_fraction"],
            "share of zero activations",
            "Blues",
            0,
            1,
        ),
    ]
    panels = [p for p in panels if p[0]]
    figure, axes = new_figure(rows=len(panels))
    axes = np.atleast_1d(axes)
    steps = data["steps"]
    for ax, (names, matrix, label, cmap_name, vmin, vmax) in zip(axes, panels, strict=True):
        cmap = mpl.colormaps[cmap_name].with_extremes(under="black", bad="white")
        image = ax.imshow(
            matrix,
            aspect="auto",
            interpolation="nearest",
            extent=(float(steps[0]) - 0.5, float(steps[-1]) + 0.5, len(names) - 0.5, -0.5),
            cmap=cmap,
            vmin=vmin,
            vmax=vmax if vmax > vmin else vmin + 1,
        )
        ax.set_yticks(range(len(names)), names, fontsize="small")
        ax.set_xlabel("step")
        ax.set_title(label)
        figure.colorbar(image, ax=ax, format="{x:.0%}" if cmap_name == "Blues" else None)
    return figure


__all__ = ["layer_health", "layer_order", "plot_layer_health"]
