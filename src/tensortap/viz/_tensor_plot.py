"""TensorPlot (seed 002): the saved activations of many layers as one interactive 3-D figure.

Every layer whose name matches ``regex`` becomes one plotly trace, placed side by side along
the x axis; its values are normalised to 0..1 per layer (blue near 0, yellow near 1), so one
colour scale serves every layer. One animation frame per chosen step, with a slider. The
first axis of a tensor of rank 2 or more is the batch:

- ``batch_sample_id=n``: sample ``n`` of the batch;
- ``batch_sample_id=-1``: summed over the batch (dead or saturated units stand out);
- ``batch_sample_id=None``: every sample (4-D samples are stacked along the channel axis).

What is left after that is drawn as stacked planes (``(N, C, H, W)`` tensors: one plane per
channel), a plane (``(N, F)``), or a line (1-D tensors, which have no batch axis). Tensors of
rank 5 or more are left out and listed in :attr:`TensorPlot.skipped`. ``label`` names the
network's input, drawn as an image in front of the layers (``color_channel`` 1: grey, 3:
colour); ``prediction`` names its output, whose arg-max shows in each frame's title.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tensortap.core._modes import parse_mode
from tensortap.exceptions import InvalidConfigError, TensorUnavailableForStep
from tensortap.query._health import layer_order
from tensortap.trials._trial import Trial, create_trial
from tensortap.viz._plotly import as_text, offline_html

try:
    import plotly.graph_objects as go
except ImportError as exc:  # pragma: no cover - plotly comes with tensortap[viz]
    raise InvalidConfigError("TensorPlot needs plotly: pip install 'tensortap[viz]'") from exc

log = logging.getLogger(__name__)

LAYER_GAP = 8.0  # x distance between layers
CHANNEL_GAP = 1.5  # x distance between the planes of one layer
MAX_RANK = 4


def _check_options(batch_sample_id: Any, color_channel: Any, steps: Any, max_points: Any) -> None:
    if batch_sample_id is not None and (
        isinstance(batch_sample_id, bool)
        or not isinstance(batch_sample_id, int)
        or batch_sample_id < -1
    ):
        raise InvalidConfigError(
            f"batch_sample_id must be a sample index (0 or more), -1 (summed over the batch) "
            f"or None (every sample); got {batch_sample_id!r}"
        )
    if color_channel not in (1, 3):
        raise InvalidConfigError(
            f"color_channel must be 1 (grey input images) or 3 (colour); got {color_channel!r}"
        )
    if isinstance(steps, bool) or not (
        (isinstance(steps, int) and steps > 0)
        or (isinstance(steps, Sequence) and all(isinstance(s, int) for s in steps))
    ):
        raise InvalidConfigError(
            f"steps must be a count of saved steps (an int > 0, as in seed 002's steps=10) or "
            f"a list of steps; got {steps!r}"
        )
    if not isinstance(max_points, int) or max_points < 100:
        raise InvalidConfigError(f"max_points must be an int of 100 or more; got {max_points!r}")


def select_samples(name: str, value: np.ndarray, batch_sample_id: int | None) -> np.ndarray:
    """What is drawn of one saved value: at most 3-D (planes x rows x columns)."""
    if value.ndim > MAX_RANK:
        raise ValueError(f"rank {value.ndim} (shape {value.shape}): TensorPlot draws ranks 0-4")
    if value.ndim <= 1:
        return value.reshape(-1).astype(np.float64)
    value = value.astype(np.float64)
    if batch_sample_id is None:
        return value.reshape(-1, *value.shape[2:]) if value.ndim == 4 else value
    if batch_sample_id == -1:
        return np.asarray(value.sum(axis=0))
    if batch_sample_id >= value.shape[0]:
        raise InvalidConfigError(
            f"batch_sample_id {batch_sample_id} is out of range for {name}, whose batch has "
            f"{value.shape[0]} samples; give 0..{value.shape[0] - 1}, -1 (summed) or None (all)"
        )
    return np.asarray(value[batch_sample_id])


def normalise(values: np.ndarray) -> np.ndarray:
    """Values mapped to 0..1 (a constant layer is all 0; NaN and inf count as 0)."""
    values = np.asarray(values, dtype=np.float64)
    finite = np.where(np.isfinite(values), values, 0.0)
    if not finite.size:
        return finite
    low, high = float(finite.min()), float(finite.max())
    if high <= low:
        return np.zeros_like(finite)
    return (finite - low) / (high - low)


def _thin(block: np.ndarray, max_points: int) -> np.ndarray:
    """Every k-th element along each axis, so that a huge layer stays drawable."""
    if block.size <= max_points:
        return block
    stride = math.ceil((block.size / max_points) ** (1.0 / block.ndim))
    return block[(slice(None, None, stride),) * block.ndim]


def _coordinates(block: np.ndarray, x0: float) -> tuple[np.ndarray, ...]:
    """x, y, z of every element of a 1-, 2- or 3-D block whose first plane sits at ``x0`` (a
    1-D block is wrapped into a near-square plane, row by row)."""
    if block.ndim == 1:
        cols = math.ceil(math.sqrt(block.size))
        rows = math.ceil(block.size / cols)
        index = np.arange(block.size)
        ys, zs = index // cols - (rows - 1) / 2, index % cols - (cols - 1) / 2
        return np.full(block.size, x0), ys.astype(np.float64), zs.astype(np.float64), block
    planes = block if block.ndim == 3 else block[np.newaxis]
    shape: tuple[int, ...] = planes.shape
    d, h, w = shape
    pd, ph, pw = np.meshgrid(np.arange(d), np.arange(h), np.arange(w), indexing="ij")
    return (
        (x0 + pd * CHANNEL_GAP).reshape(-1),
        (ph - (h - 1) / 2).reshape(-1),
        (pw - (w - 1) / 2).reshape(-1),
        planes.reshape(-1),
    )


def _input_image(value: np.ndarray, sample: int, color_channel: int) -> np.ndarray | None:
    """The input sample as an (H, W) grey or (H, W, 3) colour image, if it is one."""
    if value.ndim >= 2:
        value = value[min(sample, value.shape[0] - 1)]
    if value.ndim == 1:  # a flattened square image (load_digits: 64 = 8 x 8)
        side = math.isqrt(value.size)
        return value.reshape(side, side) if side * side == value.size and side > 1 else None
    if value.ndim == 2:
        return value
    if value.ndim != 3:
        return None
    channels_first = value.shape[0] in (1, 3) or value.shape[-1] not in (1, 3)
    image = value if not channels_first else np.moveaxis(value, 0, -1)
    if color_channel == 3 and image.shape[-1] >= 3:
        return image[..., :3]
    return image[..., 0]


class TensorPlot:
    """Seed 002's TensorPlot: ``TensorPlot(regex=".*relu_output", path=trial_dir, steps=10,
    batch_sample_id=0, color_channel=1, title="Relu outputs", label=".*input_0",
    prediction=".*output_0")``; then ``.fig`` (a plotly Figure) or ``.write_html(path)``
    (a self-contained page that opens offline). See the module docstring."""

    def __init__(
        self,
        regex: str,
        path: Trial | str | os.PathLike[str],
        steps: int | Sequence[int] = 10,
        batch_sample_id: int | None = None,
        color_channel: int = 1,
        title: str = "",
        label: str | None = None,
        prediction: str | None = None,
        mode: Any = None,
        max_points: int = 20_000,
    ) -> None:
        _check_options(batch_sample_id, color_channel, steps, max_points)
        try:
            re.compile(regex)
        except re.error as exc:
            raise InvalidConfigError(
                f"regex {regex!r} is not a regular expression: {exc}"
            ) from None
        self.trial = path if isinstance(path, Trial) else create_trial(path)
        self.regex, self.mode, self.title = regex, mode, title
        self.batch_sample_id, self.color_channel = batch_sample_id, color_channel
        self.max_points = max_points
        self.label = self._first_match(label)
        self.prediction = self._first_match(prediction)
        matched = self.trial.tensor_names(regex=regex, mode=mode)
        self.layers = sorted(
            (n for n in matched if n not in (self.label, self.prediction)), key=layer_order
        )
        if not self.layers:
            raise InvalidConfigError(
                f"no tensor matches {regex!r} in {self.trial.path}; some of its tensors: "
                f"{sorted(self.trial.tensor_names())[:8]}"
            )
        saved = self.trial.steps(mode=mode)
        self.steps = (
            self.steps_with_layers(steps, saved)
            if isinstance(steps, int)
            else [s for s in steps if s in saved]
        )
        if not self.steps:
            raise InvalidConfigError(
                f"no saved step to plot: asked for {steps!r}; {self.trial.path} has "
                f"{saved[:10] if saved else 'no steps'}{' ...' if len(saved) > 10 else ''}; "
                f"the layers are saved in full at {self.steps_with_layers(10, saved) or 'none'}"
            )
        self.skipped: dict[str, str] = {}
        self.fig = self._figure()

    def steps_with_layers(self, count: int, saved: Sequence[int] | None = None) -> list[int]:
        """The first ``count`` saved steps (of ``saved``, default all) at which some chosen
        layer was saved in full (a step holding only the loss would draw a blank frame)."""
        found: list[int] = []
        for step in self.trial.steps(mode=self.mode) if saved is None else saved:
            glob = step if self.mode is None else self.trial.global_step(self.mode, step)
            block = self.trial.step_block(glob)
            if any(block.has_raw(name) for name in self.layers):
                found.append(step)
                if len(found) == count:
                    break
        return found

    def step_label(self, step: int) -> str:
        """Which step ``step`` is, with its mode: ``TRAIN step 10`` (a mode was chosen: its
        steps), or ``global step 12 (TRAIN step 10)`` (none was: the steps of every mode, as
        global steps, whose numbers would otherwise mix TRAIN and EVAL without saying so)."""
        if self.mode is not None:
            return f"{parse_mode(self.mode).name} step {step}"
        mode, mode_step = self.trial.mode(step).name, self.trial.mode_step(step)
        return f"global step {step} ({mode} step {mode_step})"

    def _first_match(self, regex: str | None) -> str | None:
        if regex is None:
            return None
        names = sorted(self.trial.tensor_names(regex=regex, mode=self.mode), key=layer_order)
        if not names:
            raise InvalidConfigError(f"no tensor matches {regex!r} in {self.trial.path}")
        return names[0]

    def _value(self, name: str, step: int) -> np.ndarray | None:
        try:
            return self.trial.tensor(name).value(step, mode=self.mode)
        except TensorUnavailableForStep:  # not saved at this step, or only as reductions
            return None

    def _layer_blocks(self, step: int) -> list[np.ndarray | None]:
        blocks: list[np.ndarray | None] = []
        for name in self.layers:
            value = None if name in self.skipped else self._value(name, step)
            if value is not None:
                try:
                    value = select_samples(name, value, self.batch_sample_id)
                except ValueError as exc:
                    self.skipped[name] = str(exc)
                    log.warning("TensorPlot leaves out %s: %s", name, exc)
                    value = None
            blocks.append(None if value is None else _thin(value, self.max_points))
        return blocks

    def _traces(self, step: int, blocks: list[np.ndarray | None], widths: list[float]) -> list[Any]:
        traces = []
        if self.label is not None:
            traces.append(self._input_trace(step))
        x0 = 0.0
        for i, (name, block) in enumerate(zip(self.layers, blocks, strict=True)):
            xs: Any = []
            ys: Any = []
            zs: Any = []
            colors: Any = []
            if block is not None:
                xs, ys, zs, values = _coordinates(block, x0)
                colors = normalise(values)
            traces.append(
                go.Scatter3d(
                    x=xs,
                    y=ys,
                    z=zs,
                    mode="markers",
                    name=as_text(name),
                    marker={
                        "size": 2.5,
                        "color": colors,
                        "colorscale": "Viridis",
                        "cmin": 0.0,
                        "cmax": 1.0,
                        "showscale": i == 0,
                        "colorbar": {"title": {"text": "0..1 per layer"}},
                    },
                    # the name as the trace shows it: a name is never read as a template
                    hovertemplate=(
                        "%{fullData.name}<br>normalised %{marker.color:.3f}<extra></extra>"
                    ),
                )
            )
            x0 += widths[i] + LAYER_GAP
        return traces

    def _input_trace(self, step: int) -> Any:
        value = self._value(self.label, step) if self.label else None
        sample = max(self.batch_sample_id or 0, 0)
        image = None if value is None else _input_image(value, sample, self.color_channel)
        if image is None:
            return go.Scatter3d(
                x=[], y=[], z=[], mode="markers", name=f"input: {as_text(self.label)}"
            )
        h, w = image.shape[:2]
        ys, zs = np.meshgrid(np.arange(h) - (h - 1) / 2, np.arange(w) - (w - 1) / 2, indexing="ij")
        if image.ndim == 3:
            rgb = (normalise(image) * 255).astype(int).reshape(-1, 3)
            colors: Any = [f"rgb({r},{g},{b})" for r, g, b in rgb]
        else:
            grey = (normalise(image) * 255).astype(int).reshape(-1)
            colors = [f"rgb({v},{v},{v})" for v in grey]
        return go.Scatter3d(
            x=np.full(h * w, -LAYER_GAP),
            y=-ys.reshape(-1),  # image rows run downwards
            z=zs.reshape(-1),
            mode="markers",
            name=f"input: {as_text(self.label)}",
            marker={"size": 3, "color": colors, "symbol": "square"},
            hoverinfo="name",
        )

    def _frame_title(self, step: int) -> str:
        text = f"{as_text(self.title or self.regex)}: {self.step_label(step)}"
        output = self._value(self.prediction, step) if self.prediction else None
        if output is not None and output.ndim >= 1 and output.size:
            classes = output.reshape(1, -1) if output.ndim == 1 else output.reshape(len(output), -1)
            predicted = np.argmax(classes, axis=1)
            if self.batch_sample_id is not None and self.batch_sample_id >= 0:
                text += (
                    f", predicted class {predicted[min(self.batch_sample_id, len(predicted) - 1)]}"
                )
            else:
                text += f", predicted classes {predicted[:10].tolist()}"
        return text

    def _figure(self) -> Any:
        blocks = {step: self._layer_blocks(step) for step in self.steps}
        if len(self.skipped) == len(self.layers):
            raise InvalidConfigError(
                "TensorPlot has nothing to draw: "
                + "; ".join(f"{n}: {why}" for n, why in self.skipped.items())
                + ". Narrow the regex to tensors of rank 4 or less."
            )
        keep = [i for i, name in enumerate(self.layers) if name not in self.skipped]
        self.layers = [self.layers[i] for i in keep]
        blocks = {step: [per_layer[i] for i in keep] for step, per_layer in blocks.items()}
        depth = [0] * len(self.layers)  # each layer's largest plane count over the steps
        for per_layer in blocks.values():
            for i, block in enumerate(per_layer):
                if block is not None and block.ndim == 3:
                    depth[i] = max(depth[i], block.shape[0])
        widths = [max(d - 1, 0) * CHANNEL_GAP for d in depth]
        frames = [
            go.Frame(
                data=self._traces(step, blocks[step], widths),
                name=str(step),
                layout={"title": {"text": self._frame_title(step)}},
            )
            for step in self.steps
        ]
        axis = {"showgrid": False, "zeroline": False, "showticklabels": False, "title": ""}
        slider = {
            "active": 0,
            "currentvalue": {"prefix": ""},
            "steps": [
                {
                    "label": self.step_label(int(f.name)),
                    "method": "animate",
                    "args": [[f.name], {"mode": "immediate", "frame": {"duration": 0}}],
                }
                for f in frames
            ],
        }
        figure = go.Figure(data=frames[0].data, frames=frames)
        figure.update_layout(
            title={"text": frames[0].layout.title.text},
            scene={
                "xaxis": axis,
                "yaxis": axis,
                "zaxis": axis,
                "aspectmode": "manual",
                "aspectratio": {"x": 3.0, "y": 1.0, "z": 1.0},
                "camera": {"eye": {"x": 0.6, "y": -3.0, "z": 1.5}},  # the layers left to right
            },
            legend={"itemsizing": "constant", "orientation": "h", "x": 0, "y": 1.0},
            margin={"l": 0, "r": 0, "t": 90, "b": 0},
            height=700,
            sliders=[slider] if len(frames) > 1 else [],
        )
        if self.skipped:
            figure.add_annotation(
                text="left out: " + ", ".join(as_text(n) for n in sorted(self.skipped)),
                showarrow=False,
                xref="paper",
                yref="paper",
                x=0,
                y=1.0,
            )
        return figure

    @property
    def trace_count(self) -> int:
        """Traces per frame: one per layer, and one for the input image when ``label`` is set."""
        return len(self.layers) + (self.label is not None)

    def to_html(self, full_html: bool = True) -> str:
        """The figure as HTML with plotly.js inlined, compressed (no network needed to open
        it: :func:`~tensortap.viz._plotly.offline_html`)."""
        return offline_html(self.fig, full_html=full_html, auto_play=False)

    def write_html(self, out: str | os.PathLike[str]) -> Path:
        """Write a self-contained HTML page of the figure; returns its path."""
        path = Path(out)
        path.write_text(self.to_html(), encoding="utf-8")
        return path


__all__ = ["TensorPlot", "normalise", "select_samples"]
