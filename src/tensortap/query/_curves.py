"""Lines over steps, as numbers: one tensor's value (or a reduction of it) per step, per mode,
from the series path where it holds them (what ``viz.plot_tensors``, the report's curves and
the dashboard's charts draw)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensortap.core._downsample import Series, StreamedMinMax, minmax_buckets
from tensortap.core._reductions import compute_reduction
from tensortap.trials._index import natural_key
from tensortap.trials._series import SeriesColumns
from tensortap.trials._trial import Trial

#: Buckets of a long line drawn (each kept as its min and max): a chart never draws more than
#: about two points per bucket, whoever draws it.
LINE_BUCKETS = 600


def tensor_series(
    trial: Trial, name: str, mode: Any = None, reduction: str = "mean"
) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of one tensor: its value where it has one element, else ``reduction``
    of it (the saved reduction where the hook saved only that)."""
    tensor = trial.tensor(name)
    steps = tensor.steps(mode=mode)
    found = _from_series(trial, name, mode, reduction, len(steps))
    if found is not None:
        return found
    saved = tensor.values(mode=mode)  # every raw value, fetched together
    values = []
    for step in steps:
        value = saved.get(step)
        if value is None:  # only reductions were saved
            values.append(float(tensor.reduction_value(step, reduction, mode=mode)))
            continue
        flat = value.reshape(-1)
        values.append(float(flat[0]) if flat.size == 1 else compute_reduction(flat, reduction))
    return np.asarray(steps, dtype=np.int64), np.asarray(values, dtype=np.float64)


def _from_series(
    trial: Trial, name: str, mode: Any, reduction: str, count: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """The tensor's one-element values, or its saved ``reduction``, from the series path when
    it holds one at every step (a few reads, whatever the run's length); None otherwise."""
    for statistic in ("value", reduction):
        cols = trial.series(name, statistic=statistic, mode=mode)
        if cols.rows == count:
            x = cols["step"] if mode is not None else cols["global_step"]
            order = np.argsort(x, kind="stable")
            return x[order].astype(np.int64), cols["value"][order]
    return None


def read_series(
    trial: Trial, names: Sequence[str], statistic: str
) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """``statistic`` of each of ``names`` (``"value"``: the one-element value, or a reduction's
    name) per mode, as ``{(tensor, mode name): (global steps, values)}`` sorted by step, from
    the series path (one read per segment, never one per step); a step saved by several
    workers answers with the first worker's value (as ``Tensor.value`` does)."""
    if not names:
        return {}
    return _lines(trial.series(list(names), statistic=statistic))


def _lines(columns: SeriesColumns) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """:func:`read_series` of rows read (all of them, or a window of steps)."""
    parts: dict[tuple[str, str], list[tuple[Any, np.ndarray, np.ndarray]]] = {}
    for series, rows in columns.groups():
        parts.setdefault((series.tensor, series.mode.name), []).append(
            (natural_key(series.worker), rows["global_step"], rows["value"])
        )
    out: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
    for key, found in sorted(parts.items()):
        found.sort(key=lambda part: part[0])
        if len(found) == 1:
            out[key] = (found[0][1], found[0][2])
            continue
        steps = np.concatenate([p[1] for p in found])
        values = np.concatenate([p[2] for p in found])
        rank = np.concatenate([np.full(len(p[1]), i) for i, p in enumerate(found)])
        order = np.lexsort((rank, steps))  # by step, the first worker's first
        steps, values = steps[order], values[order]
        first = np.concatenate(([True], np.diff(steps) != 0))
        out[key] = (steps[first], values[first])
    return out


#: Times the lines are walked again when the run grew between counting and shrinking them;
#: then they are read whole.
_WALKS = 3


def shrunk_series(
    trial: Trial, names: Sequence[str], statistic: str, buckets: int
) -> dict[tuple[str, str], Series]:
    """:func:`read_series`, each line shrunk by
    :func:`~tensortap.core._downsample.minmax_buckets` to ``buckets``, without holding a
    long line whole: when the lines do not fit in one read of the series reader
    (:meth:`SeriesReader.series_windows`), they are walked a window of steps at a time twice
    (their finite values counted, then shrunk as they come,
    :class:`~tensortap.core._downsample.StreamedMinMax`): the same points."""
    if not names:
        return {}
    for _ in range(_WALKS):
        walk = trial.series_windows(list(names), statistic=statistic)
        first = next(walk, None)
        if first is None:
            return {}
        second = next(walk, None)
        if second is None:  # it fits: one read
            found = _lines(first)
            return {key: _shrunk(steps, values, buckets) for key, (steps, values) in found.items()}
        finite: dict[tuple[str, str], int] = {}
        for window in itertools.chain((first, second), walk):
            for key, (_, values) in _lines(window).items():
                finite[key] = finite.get(key, 0) + int(np.isfinite(values).sum())
        del first, second
        streams = {key: StreamedMinMax(count, buckets) for key, count in finite.items()}
        grew = False
        for window in trial.series_windows(list(names), statistic=statistic):
            for key, (steps, values) in _lines(window).items():
                stream = streams.get(key)
                if stream is None:
                    grew = True
                    continue
                stream.put(steps.astype(np.float64), values)
        if not grew and all(stream.complete for stream in streams.values()):
            return {key: stream.result() for key, stream in sorted(streams.items())}
    found = read_series(trial, names, statistic)
    return {key: _shrunk(steps, values, buckets) for key, (steps, values) in found.items()}


def _shrunk(steps: np.ndarray, values: np.ndarray, buckets: int) -> Series:
    return minmax_buckets(np.asarray(steps, dtype=np.float64), np.asarray(values), buckets)


def line_label(name: str, mode: str, modes: int) -> str:
    """A line's label in :func:`mode_lines`: the name, with its mode's where ``modes`` (the
    number of modes drawn) is more than one."""
    return name if modes == 1 else f"{name} ({mode})"


def line_modes(trial: Trial, names: Sequence[str]) -> dict[str, str]:
    """Each label :func:`mode_lines` may give ``names`` (no ``mode``), to its mode's name."""
    modes = trial.modes()
    return {line_label(n, m.name, len(modes)): m.name for n in names for m in modes}


def mode_lines(
    trial: Trial,
    names: Sequence[str],
    mode: Any = None,
    reduction: str = "mean",
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One line per tensor of ``names`` and mode, ``{label: (steps, values)}`` in that order:
    ``label`` is the name, with the mode's name where the trial has several modes and
    ``mode`` is not given. Without ``mode``, each mode is its own line over global steps (so
    that modes and marks line up; TRAIN and EVAL are never joined into one); with it, over
    that mode's steps. A tensor with no one-element value (a loss per sample) is reduced per
    step by ``reduction`` (:func:`tensor_series`); a line with no step is left out."""
    modes = [mode] if mode is not None else trial.modes()
    read = read_series(trial, names, "value") if mode is None else {}
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in names:
        for each in modes:
            label = line_label(name, each.name, len(modes))
            if mode is None and (name, each.name) in read:
                out[label] = read[(name, each.name)]
                continue
            steps, values = tensor_series(trial, name, each, reduction)
            if not len(steps):
                continue
            if mode is None:  # one axis for every mode: global steps
                steps = np.asarray(trial.tensor(name).global_steps(each), dtype=np.int64)
            out[label] = (steps, values)
    return out


def shrunk_mode_lines(
    trial: Trial, names: Sequence[str], buckets: int = LINE_BUCKETS
) -> dict[str, Series]:
    """:func:`mode_lines` (each mode its own line over global steps), each line shrunk by
    :func:`~tensortap.core._downsample.minmax_buckets` to ``buckets``: the lines the series
    path holds through :func:`shrunk_series` (a long line never held whole), the others
    (a tensor with no one-element value) reduced per step and shrunk as :func:`mode_lines`
    reads them."""
    modes = trial.modes()
    read = shrunk_series(trial, names, "value", buckets)
    out: dict[str, Series] = {}
    for name in names:
        for each in modes:
            label = line_label(name, each.name, len(modes))
            found = read.get((name, each.name))
            if found is not None:
                out[label] = found
                continue
            steps, values = tensor_series(trial, name, each, "mean")
            if not len(steps):
                continue
            steps = np.asarray(trial.tensor(name).global_steps(each), dtype=np.int64)
            out[label] = _shrunk(steps, values, buckets)
    return out


__all__ = [
    "LINE_BUCKETS",
    "line_label",
    "line_modes",
    "mode_lines",
    "read_series",
    "shrunk_mode_lines",
    "shrunk_series",
    "tensor_series",
]
