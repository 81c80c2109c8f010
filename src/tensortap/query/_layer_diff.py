"""Which layer changed between two runs: a per-layer statistical diff of two trials (``tensortap
diff RUN_A RUN_B``, the compare view's "layers that differ").

For every tensor both runs saved in the ``gradients``, ``weights``, ``biases`` and activation
collections (``relu_activations``, ``outputs``), at the TRAIN steps both saved it (aligned by
TRAIN step number; at most :data:`MAX_STEPS` of them, spread over the run), a few statistics
of its values are compared step by step:

- ``rms`` (root mean square: the layer's scale) of every tensor;
- ``drift`` of a weight: how far it moved since the first aligned step, relative to its size
  there (``||w_t - w_0|| / ||w_0||``): a frozen layer's is 0, a too-large learning rate's big;
- ``zero_share`` of an activation: the share of exact zeros (a dying ReLU layer).

Each pair of per-step values gives ``d_t = log10(b_t / a_t)`` (values at or below
:data:`FLOOR` taken as the floor: a frozen layer's drift of 0 is at least 6 orders below a
moving one's; ``zero_share`` compares ``b_t - a_t`` directly). A statistic's **effect** is the
median of ``|d_t|`` (orders of magnitude apart, or the difference of shares), its **paired
effect size** ``d_z = mean(d) / sd(d)`` (Cohen's, for paired samples; large when the change is
steady rather than noise). A tensor only one run saved (a frozen layer has no gradient) is
the largest effect of all (``inf``), and so is a weight that never moves in one run and moves
in the other (``frozen``).

A change to one layer spreads: weights ten times larger scale the gradients of the layers
before and after them too, and so how far those move. So a layer (a tensor's name without
``gradient/`` in front and ``.weight``/``.bias`` at the end) is ranked first by what it holds
itself, its **own** effect: its weights' and initial weights' ``rms``, a tensor saved in one
run only, ``frozen``; then by the largest effect of its other statistics (gradients, drift,
activations: what follows from a change anywhere). Layers are listed largest first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensortap.exceptions import MissingCollectionFiles, TensortapError
from tensortap.query._health import layer_order, spread
from tensortap.trials._trial import Trial

#: Aligned steps read at most per tensor (spread over the steps both runs saved).
MAX_STEPS = 20
#: Values at or below this are taken as it (log ratios of a zero stay finite).
FLOOR = 1e-12
#: The collections compared, with the statistics of each.
COLLECTIONS = {
    "initial_weights": ("rms",),
    "gradients": ("rms",),
    "weights": ("rms", "drift"),
    "biases": ("rms",),
    "relu_activations": ("rms", "zero_share"),
    "outputs": ("rms",),
}
#: The statistics of what a layer holds itself (see the module docstring).
OWN = {("initial_weights", "rms"), ("weights", "rms"), ("weights", "frozen")}
_PREFIX = re.compile(r"^(gradient|gradients|grad|initial)/")
_SUFFIX = re.compile(r"[._/](weight|bias|kernel|output|input)(_\d+)?$")


def layer_of(tensor: str) -> str:
    """The layer a tensor belongs to: ``gradient/fc1.weight`` and ``fc1.bias`` are ``fc1``."""
    return _SUFFIX.sub("", _PREFIX.sub("", tensor)) or tensor


@dataclass(frozen=True)
class StatisticDiff:
    """One statistic of one tensor in two runs: its median in each, the effect (see the
    module docstring) and the paired effect size. Statistic ``saved``: a tensor one run did
    not save; ``a``/``b`` count the steps each run saved it (None: never)."""

    tensor: str
    collection: str
    statistic: str
    steps: int  # aligned steps compared
    a: float | None
    b: float | None
    effect: float
    effect_size: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "tensor": self.tensor,
            "collection": self.collection,
            "statistic": self.statistic,
            "steps": self.steps,
            "a": _json(self.a),
            "b": _json(self.b),
            "effect": _json(self.effect),
            "effect_size": _json(self.effect_size),
        }


def is_own(diff: StatisticDiff) -> bool:
    """Whether ``diff`` is of what the layer holds itself (see the module docstring)."""
    return diff.statistic == "saved" or (diff.collection, diff.statistic) in OWN


@dataclass
class LayerDiff:
    """One layer: its own effect (``score``), the largest of its other statistics'
    (``spread``), and its statistics, own ones first, largest first."""

    layer: str
    score: float
    spread: float
    statistics: list[StatisticDiff] = field(default_factory=list)

    @property
    def headline(self) -> str:
        top = self.statistics[0]
        if top.a is None or top.b is None:
            return f"{top.tensor} saved in run {'B' if top.a is None else 'A'} only"
        if top.statistic == "frozen":
            return f"{top.tensor} never moves in run {'A' if top.a == 0 else 'B'}"
        if top.statistic == "zero_share":
            return f"{top.tensor} zero share {top.a:.3g} -> {top.b:.3g}"
        return f"{top.tensor} {top.statistic} {top.a:.3g} -> {top.b:.3g} ({_times(top)})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "score": _json(self.score),
            "spread": _json(self.spread),
            "headline": self.headline,
            "statistics": [s.to_dict() for s in self.statistics],
        }


def _times(diff: StatisticDiff) -> str:
    a, b = max(abs(diff.a or 0.0), FLOOR), max(abs(diff.b or 0.0), FLOOR)
    ratio = b / a
    return f"x{ratio:.3g}" if ratio >= 1 else f"/{1 / ratio:.3g}"


def _json(value: float | None) -> float | str | None:
    if value is None or math.isfinite(value):
        return value
    return "Infinity" if value > 0 else "-Infinity" if value < 0 else "NaN"


def _names(trial: Trial, collection: str) -> set[str]:
    try:
        return set(trial.tensor_names(collection=collection))
    except (MissingCollectionFiles, TensortapError):
        return set()


def _train_steps(trial: Trial, name: str) -> list[int]:
    """The TRAIN mode steps ``name`` was saved at."""
    tensor = trial.tensor(name)
    return [trial.mode_step(s) for s in tensor.steps(mode="TRAIN")]


def _value(trial: Trial, name: str, mode_step: int) -> np.ndarray[Any, Any] | None:
    try:
        array = trial.tensor(name).value(trial.global_step("TRAIN", mode_step))
    except TensortapError:
        return None
    array = np.asarray(array, dtype=np.float64)
    return array if array.size else None


def _statistics(
    trial: Trial, name: str, steps: Sequence[int], wanted: Sequence[str]
) -> dict[str, np.ndarray[Any, Any]]:
    """Each wanted statistic of ``name`` at ``steps`` (NaN where not readable)."""
    out = {s: np.full(len(steps), np.nan) for s in wanted}
    first: np.ndarray[Any, Any] | None = None
    for i, step in enumerate(steps):
        array = _value(trial, name, step)
        if array is None:
            continue
        finite = array[np.isfinite(array)]
        if "rms" in out:
            out["rms"][i] = float(np.sqrt(np.mean(finite**2))) if finite.size else np.nan
        if "zero_share" in out:
            out["zero_share"][i] = float(np.mean(array == 0))
        if "drift" in out:
            if first is None:
                first = array
            if first.shape == array.shape:
                base = float(np.linalg.norm(first))
                out["drift"][i] = float(np.linalg.norm(array - first)) / max(base, FLOOR)
    if "drift" in out and len(steps):
        out["drift"][0] = np.nan  # the first step's drift is 0 by definition: not evidence
    return out


def _compare(
    name: str, collection: str, statistic: str, a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]
) -> StatisticDiff | None:
    kept = np.isfinite(a) & np.isfinite(b)
    if not kept.any():
        return None
    a, b = a[kept], b[kept]
    if statistic == "zero_share":
        d = b - a
    else:
        d = np.log10(np.maximum(np.abs(b), FLOOR)) - np.log10(np.maximum(np.abs(a), FLOOR))
    spread_ = float(np.std(d, ddof=1)) if len(d) > 1 else 0.0
    mean = float(np.mean(d))
    size: float | None = None
    if len(d) >= 2:
        size = mean / spread_ if spread_ > 0 else (math.copysign(math.inf, mean) if mean else 0.0)
    return StatisticDiff(
        name,
        collection,
        statistic,
        len(d),
        float(np.median(a)),
        float(np.median(b)),
        float(np.median(np.abs(d))),
        size,
    )


def layer_diff(a: Trial, b: Trial, max_steps: int = MAX_STEPS) -> list[LayerDiff]:
    """The layers of two runs by how much they differ, the most first (see the module
    docstring); statistics of each layer largest first."""
    found: dict[str, list[StatisticDiff]] = {}
    for collection, wanted in COLLECTIONS.items():
        in_a, in_b = _names(a, collection), _names(b, collection)
        for name in sorted(in_a | in_b, key=layer_order):
            if name not in in_a or name not in in_b:
                saved_a = float(len(_train_steps(a, name))) if name in in_a else None
                saved_b = float(len(_train_steps(b, name))) if name in in_b else None
                found.setdefault(layer_of(name), []).append(
                    StatisticDiff(name, collection, "saved", 0, saved_a, saved_b, math.inf, None)
                )
                continue
            steps = sorted(set(_train_steps(a, name)) & set(_train_steps(b, name)))
            steps = spread(steps, max_steps)
            if not steps:
                continue
            stats_a = _statistics(a, name, steps, wanted)
            stats_b = _statistics(b, name, steps, wanted)
            for statistic in wanted:
                diff = _compare(name, collection, statistic, stats_a[statistic], stats_b[statistic])
                if diff is not None:
                    found.setdefault(layer_of(name), []).append(diff)
            if "drift" in wanted:
                frozen = _frozen(name, collection, stats_a["drift"], stats_b["drift"])
                if frozen is not None:
                    found.setdefault(layer_of(name), []).append(frozen)
    layers = []
    for layer, statistics in found.items():
        statistics.sort(key=lambda s: (not is_own(s), -s.effect, s.tensor))
        own = [s.effect for s in statistics if is_own(s)]
        other = [s.effect for s in statistics if not is_own(s)]
        layers.append(LayerDiff(layer, max(own, default=0.0), max(other, default=0.0), statistics))
    layers.sort(key=lambda d: (-d.score, -d.spread, layer_order(d.layer)))
    return layers


def _frozen(
    name: str, collection: str, a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]
) -> StatisticDiff | None:
    """A weight that never moved in one run and moved in the other (None: both or neither)."""
    kept = np.isfinite(a) & np.isfinite(b)
    if kept.sum() < 1:
        return None
    still_a, still_b = bool(np.all(a[kept] == 0)), bool(np.all(b[kept] == 0))
    if still_a == still_b:
        return None
    moved_a, moved_b = float(np.median(a[kept])), float(np.median(b[kept]))
    return StatisticDiff(
        name, collection, "frozen", int(kept.sum()), moved_a, moved_b, math.inf, None
    )
