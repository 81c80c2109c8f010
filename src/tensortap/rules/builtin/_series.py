"""Losses as observations that can be compared like with like.

A TRAIN (or GLOBAL) step's loss is one observation. EVAL steps are different validation
batches, so comparing one EVAL step with another compares batches, not the model: an
evaluation *pass* (a run of consecutive EVAL steps) is one observation, the mean of its losses,
complete when a step of another mode follows it (or when training has ended).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from tensortap.core.modes import ModeKeys
from tensortap.rules.builtin._common import scalar

if TYPE_CHECKING:
    from tensortap.trials.trial import Trial


@dataclass(frozen=True)
class Observation:
    """One loss to compare: ``key`` (a tensor name, or "loss" for the mean of a step's
    losses), its ``mode``, ``mode_step`` (of a pass: its last EVAL step), the global ``step``,
    ``value`` (of a pass: its mean) and how many steps it spans."""

    key: str
    mode: ModeKeys
    mode_step: int
    step: int
    value: float
    steps: int = 1
    tensors: tuple[str, ...] = ()

    @property
    def finite(self) -> bool:
        return math.isfinite(self.value)


@dataclass
class _Pass:
    values: dict[str, list[float]] = field(default_factory=dict)
    tensors: dict[str, set[str]] = field(default_factory=dict)
    last: tuple[int, int] = (0, 0)  # (global step, mode step) of its last step


class LossSeries:
    """Turns the steps a rule walks into :class:`Observation` s (see the module docstring).

    ``losses(step)`` names the loss tensors saved at a global step; with ``per_name`` each
    loss is its own series, else a step's losses are averaged into one ("loss").
    """

    def __init__(
        self, trial: Trial, losses: Callable[[int], list[str]], per_name: bool = True
    ) -> None:
        self.trial, self.losses, self.per_name = trial, losses, per_name
        self._pass: _Pass | None = None
        self.history: dict[tuple[str, ModeKeys], list[Observation]] = {}

    def observe(self, step: int) -> list[Observation]:
        """The observations complete at global ``step`` (kept in :attr:`history` too)."""
        mode, mode_step = self.trial.mode(step), self.trial.mode_step(step)
        found: list[Observation] = []
        if mode != ModeKeys.EVAL and self._pass is not None:
            found += self._close()
        values = self._values(step)
        if mode == ModeKeys.EVAL:
            current = self._pass = self._pass or _Pass()
            for key, (value, tensors) in values.items():
                current.values.setdefault(key, []).append(value)
                current.tensors.setdefault(key, set()).update(tensors)
            current.last = (step, mode_step)
            if self._ended_at(step):
                found += self._close()
        elif mode in (ModeKeys.TRAIN, ModeKeys.GLOBAL):
            found += [
                Observation(key, mode, mode_step, step, value, 1, tuple(tensors))
                for key, (value, tensors) in values.items()
            ]
        for obs in found:
            self.history.setdefault((obs.key, obs.mode), []).append(obs)
        return found

    def _values(self, step: int) -> dict[str, tuple[float, list[str]]]:
        names = self.losses(step)
        values = {n: scalar(self.trial.tensor(n), step) for n in names}
        if self.per_name or not values:
            return {n: (v, [n]) for n, v in values.items()}
        return {"loss": (float(np.mean(list(values.values()))), names)}

    def _ended_at(self, step: int) -> bool:
        steps = self.trial.steps()
        return bool(steps) and steps[-1] == step and self.trial.loaded_all_steps

    def _close(self) -> list[Observation]:
        done, self._pass = self._pass, None
        if done is None:
            return []
        step, mode_step = done.last
        return [
            Observation(
                key,
                ModeKeys.EVAL,
                mode_step,
                step,
                float(np.mean(values)),
                len(values),
                tuple(sorted(done.tensors[key])),
            )
            for key, values in done.values.items()
        ]


def progress(history: list[Observation]) -> float:
    """How far the loss has come down since the start, as a fraction of where it started
    (0.3: 30% lower; <= 0: no progress), from the medians of the first and the last three
    observations (single noisy batches move neither)."""
    if len(history) < 2:
        return 0.0
    start = float(np.median([o.value for o in history[:3]]))
    recent = float(np.median([o.value for o in history[-3:]]))
    if not (math.isfinite(start) and math.isfinite(recent)) or start == 0:
        return 0.0
    return (start - recent) / abs(start)
