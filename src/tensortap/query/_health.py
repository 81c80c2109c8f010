"""Per-layer health over time, as numbers: the gradient norm of every layer and the share of
zero activations, layers x steps (what the heat maps of ``viz``, the dashboard and the report
draw)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tensortap.exceptions import InvalidConfigError, MissingCollectionFiles
from tensortap.trials._index import natural_key
from tensortap.trials._series import SeriesColumns
from tensortap.trials._step_block import StepBlock
from tensortap.trials._trial import Trial

#: Columns of a layer-health heat map at most, whatever the run's length (the dashboard and the
#: report alike): a long run's steps are spread or bucketed.
HEAT_COLUMNS = 160


def layer_order(name: str) -> tuple[Any, ...]:
    """Sort layer2 before layer10 (numbers anywhere in the name compare as numbers)."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def layer_names(
    trial: Trial, collection: str, order: Callable[[str], Any] = layer_order
) -> list[str]:
    """The tensors of ``collection`` sorted by ``order``; none when the collection was not
    saved (its panel is left out)."""
    try:
        return sorted(trial.tensor_names(collection=collection), key=order)
    except MissingCollectionFiles:
        return []


def step_health(
    block: StepBlock, gradients: Sequence[str], activations: Sequence[str]
) -> tuple[dict[str, float], dict[str, float]]:
    """At one step: the L2 norm of each of ``gradients`` saved there, and the share of exact
    zeros of each of ``activations`` saved there in full, by name (absent: not saved)."""
    present = [n for n in gradients if n in block]
    norms = dict(zip(present, block.reduce(present, "l2").tolist(), strict=True)) if present else {}
    raw = [n for n in activations if block.has_raw(n)]
    shares: dict[str, float] = {}
    if raw:
        counted = block.count_where(raw, lambda x: x == 0) / np.maximum(block.sizes(raw), 1)
        shares = dict(zip(raw, counted.tolist(), strict=True))
    return norms, shares


def layer_health(
    trial: Trial,
    gradients: str = "gradients",
    activations: str = "relu_activations",
    steps: list[int] | None = None,
) -> dict[str, Any]:
    """The numbers behind the layer-health heat maps: ``steps``; ``gradient_names`` and
    ``gradient_norms`` (names x steps, L2 norm, NaN where not saved); ``activation_names``
    and ``zero_fraction`` (names x steps, share of exact zeros, NaN where not saved)."""
    grad_names = layer_names(trial, gradients)
    act_names = layer_names(trial, activations)
    if not grad_names and not act_names:
        raise InvalidConfigError(
            f"the trial has no tensors in the {gradients!r} or {activations!r} collections"
        )
    wanted = trial.steps() if steps is None else list(steps)
    norms = np.full((len(grad_names), len(wanted)), np.nan)
    zeros = np.full((len(act_names), len(wanted)), np.nan)
    grad_row = {n: i for i, n in enumerate(grad_names)}
    act_row = {n: i for i, n in enumerate(act_names)}
    for column, block in enumerate(trial.iter_step_blocks(wanted)):
        found, shares = step_health(block, grad_names, act_names)
        if found:
            norms[[grad_row[n] for n in found], column] = list(found.values())
        if shares:
            zeros[[act_row[n] for n in shares], column] = list(shares.values())
    return {
        "steps": np.asarray(wanted, dtype=np.int64),
        "gradient_names": grad_names,
        "gradient_norms": norms,
        "activation_names": act_names,
        "zero_fraction": zeros,
    }


def spread(steps: Sequence[int], most: int) -> list[int]:
    """At most ``most`` of ``steps``, spread evenly over them (the first and last kept)."""
    if len(steps) <= most:
        return list(steps)
    picks = np.unique(np.linspace(0, len(steps) - 1, most).round().astype(int))
    return [steps[i] for i in picks]


def heat_width(steps: Sequence[int], most: int = HEAT_COLUMNS) -> int:
    """The global-step width of a heat map's column over the saved ``steps`` (sorted): 1, a
    column per step, when they are at most ``most``; else that of ``most`` buckets over the
    run, as ``series_buckets(count=most)`` cuts them."""
    if len(steps) <= most:
        return 1
    return max(1, -(-(int(steps[-1]) + 1 - int(steps[0])) // most))


def norm_buckets(saved: SeriesColumns, start: int, width: int) -> dict[str, dict[int, float]]:
    """The largest saved norm of each tensor per bucket of ``width`` global steps from
    ``start`` (``saved``: ``series_buckets`` of the ``l2`` statistic cut so), as
    ``{tensor: {bucket number: norm}}``; NaN where no value of the bucket is finite. A norm
    saved by several workers: the first worker's (as the trial's reads answer); one saved in
    several modes: the largest of theirs."""
    out: dict[str, dict[int, float]] = {}
    done: set[tuple[str, str]] = set()
    for key, part in sorted(saved.groups(), key=lambda g: natural_key(g[0].worker)):
        if (key.tensor, key.mode.name) in done:
            continue
        done.add((key.tensor, key.mode.name))
        row = out.setdefault(key.tensor, {})
        buckets = (np.asarray(part["first_step"]) - start) // width
        for bucket, high in zip(buckets.tolist(), part["max"].tolist(), strict=True):
            old = row.get(bucket)
            row[bucket] = high if old is None else float(np.fmax(old, high))
    return out


__all__ = [
    "HEAT_COLUMNS",
    "heat_width",
    "layer_health",
    "layer_names",
    "layer_order",
    "norm_buckets",
    "spread",
    "step_health",
]
