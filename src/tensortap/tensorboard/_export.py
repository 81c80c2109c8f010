"""Saved steps as TensorBoard scalars and histograms.

One TensorBoard run per mode (``train``, ``eval``, ``predict``, ``global`` directories under the
output directory), stepped by the step within the mode, as smdebug wrote them:

- a saved tensor with one element (a loss, a metric, a scalar) is a scalar of its name;
- a saved reduction is a scalar named ``<tensor>/<reduction>`` (``<tensor>/abs_<reduction>``);
- any other saved tensor is a histogram of its finite values (unless ``histograms=False``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tensortap.core._dtypes import decode_array
from tensortap.core._modes import ModeKeys
from tensortap.core._records import RecordKind, StepBatch
from tensortap.exceptions import InvalidConfigError
from tensortap.tensorboard._events import EventFile

if TYPE_CHECKING:
    from tensortap.trials._step_block import StepBlock
    from tensortap.trials._trial import Trial


class TensorBoardExporter:
    """Writes steps into TensorBoard event files under ``out_dir``, one run per mode."""

    def __init__(
        self, out_dir: str | os.PathLike[str], histograms: bool = True, bins: int = 30
    ) -> None:
        if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
            raise InvalidConfigError(f"bins must be an int >= 1, got {bins!r}")
        if not isinstance(out_dir, (str, os.PathLike)) or "://" in str(out_dir):
            raise InvalidConfigError(
                f"TensorBoard output goes to a local directory, got {out_dir!r}"
            )
        self.out_dir = Path(out_dir)
        self.histograms = bool(histograms)
        self.bins = bins
        self._runs: dict[ModeKeys, EventFile] = {}
        self.counts = {"steps": 0, "scalars": 0, "histograms": 0}

    def _run(self, mode: ModeKeys) -> EventFile:
        run = self._runs.get(mode)
        if run is None:
            run = self._runs[mode] = EventFile(self.out_dir / mode.name.lower())
        return run

    # -- what one step saved --
    def add_tensor(
        self, mode: ModeKeys, step: int, wall_time: float, name: str, value: np.ndarray
    ) -> None:
        if value.dtype.kind not in "biuf":  # complex: no single number to plot
            return
        if value.size == 1:
            self._run(mode).scalar(name, float(value.reshape(-1)[0]), step, wall_time)
            self.counts["scalars"] += 1
        elif (
            value.size
            and self.histograms
            and self._run(mode).histogram(name, value, step, wall_time, self.bins)
        ):
            self.counts["histograms"] += 1

    def add_reduction(
        self,
        mode: ModeKeys,
        step: int,
        wall_time: float,
        name: str,
        reduction: str,
        on_abs: bool,
        value: float,
    ) -> None:
        tag = f"{name}/{'abs_' if on_abs else ''}{reduction}"
        self._run(mode).scalar(tag, float(value), step, wall_time)
        self.counts["scalars"] += 1

    def add_batch(self, batch: StepBatch) -> None:
        """A step as the hook hands it to the writer (called on the writer's thread)."""
        mode, step, wall = batch.mode, batch.mode_step, batch.wall_time
        for record in batch.records:
            if record.kind == RecordKind.TENSOR and record.data is not None:
                raw = memoryview(record.data.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
                value = decode_array(raw, record.dtype, record.shape)
                self.add_tensor(mode, step, wall, record.name, value)
            elif record.kind == RecordKind.REDUCTION:
                self.add_reduction(
                    mode, step, wall, record.name, record.reduction, record.on_abs, record.value
                )
        self.counts["steps"] += 1

    def add_block(self, block: StepBlock, mode: ModeKeys, step: int, wall_time: float) -> None:
        """A step as a trial reads it."""
        for name in block.saved_order():
            if block.has_raw(name):
                self.add_tensor(mode, step, wall_time, name, block.value(name))
            for (reduction, on_abs), value in block.saved_reductions(name).items():
                self.add_reduction(mode, step, wall_time, name, reduction, on_abs, value)
        self.counts["steps"] += 1

    def flush(self) -> None:
        for run in self._runs.values():
            run.flush()

    def close(self) -> None:
        for run in self._runs.values():
            run.close()

    def summary(self) -> dict[str, Any]:
        return {
            **self.counts,
            "out_dir": str(self.out_dir),
            "runs": sorted(m.name.lower() for m in self._runs),
        }


def export_trial(
    trial: Trial | str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    histograms: bool = True,
    bins: int = 30,
) -> dict[str, Any]:
    """Write every step of ``trial`` (the first worker's values) as TensorBoard event files
    under ``out_dir``; returns what was written (steps, scalars, histograms, runs)."""
    from tensortap.trials._trial import Trial, create_trial

    if not isinstance(trial, Trial):
        trial = create_trial(trial)
    exporter = TensorBoardExporter(out_dir, histograms, bins)
    try:
        for block in trial.iter_step_blocks():
            step = block.step
            wall = trial.wall_time(step) or 0.0
            exporter.add_block(block, trial.mode(step), trial.mode_step(step), wall)
    finally:
        exporter.close()
    return exporter.summary()
