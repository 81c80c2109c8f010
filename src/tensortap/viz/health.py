"""Per-layer health over time: the gradient norm of every layer and the share of zero
activations, as heat maps (layers x steps), to see vanishing gradients or dead units at once."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from tensortap.exceptions import InvalidConfigError, MissingCollectionFiles
from tensortap.trials.trial import Trial
from tensortap.viz._figure import new_figure


def layer_order(name: str) -> tuple[Any, ...]:
    """Sort layer2 before layer10 (numbers anywhere in the name compare as numbers)."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _names(trial: Trial, collection: str) -> list[str]:
    try:
        return sorted(trial.tensor_names(collection=collection), key=layer_order)
    except MissingCollectionFiles:  # not saved by this job: that panel is left out
        return []


def layer_health(
    trial: Trial,
    gradients: str = "gradients",
    activations: str = "relu_activations",
    steps: list[int] | None = None,
) -> dict[str, Any]:
    """The numbers behind :func:`plot_layer_health`: ``steps``; ``gradient_names`` and
    ``gradient_norms`` (names x steps, L2 norm, NaN where not saved); ``activation_names``
    and ``zero_fraction`` (names x steps, share of exact zeros, NaN where not saved)."""
    grad_names, act_names = _names(trial, gradients), _names(trial, activations)
    if not grad_names and not act_names:
        raise InvalidConfigError(
            f"the trial has no tensors in the {gradients!r} or {activations!r} collections"
        )
    wanted = trial.steps() if steps is None else list(steps)
    norms = np.full((len(grad_names), len(wanted)), np.nan)
    zeros = np.full((len(act_names), len(wanted)), np.nan)
    for column, block in enumerate(trial.iter_step_blocks(wanted)):
        present = [i for i, n in enumerate(grad_names) if n in block]
        if present:
            norms[present, column] = block.reduce([grad_names[i] for i in present], "l2")
        raw = [i for i, n in enumerate(act_names) if block.has_raw(n)]
        if raw:
            names = [act_names[i] for i in raw]
            sizes = block.sizes(names)
            counted = block.count_where(names, lambda x: x == 0)
            zeros[raw, column] = counted / np.maximum(sizes, 1)
    return {
        "steps": np.asarray(wanted, dtype=np.int64),
        "gradient_names": grad_names,
        "gradient_norms": norms,
        "activation_names": act_names,
        "zero_fraction": zeros,
    }


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
