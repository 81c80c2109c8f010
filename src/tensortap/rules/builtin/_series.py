"""Losses as observations that can be compared like with like.

A TRAIN (or GLOBAL) step's loss is one observation. EVAL steps are different validation
batches, so comparing one EVAL step with another compares batches, not the model: an
evaluation *pass* (a run of consecutive EVAL steps) is one observation, the mean of its losses,
complete when a step of another mode follows it (or when training has ended).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from tensortap.core._collections import STAGE
from tensortap.core._modes import ModeKeys

if TYPE_CHECKING:
    from tensortap.rules._numbers import Scalars
    from tensortap.trials._trial import Trial


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


class _Values:
    """A history's values as one float64 array, grown by doubling: a rule that looks at the
    whole history at every step reads a view, not a list built again (which made a long
    run's walk quadratic)."""

    def __init__(self) -> None:
        self._data = np.empty(64, dtype=np.float64)
        self._size = 0

    def append(self, value: float) -> None:
        if self._size == len(self._data):
            self._data = np.concatenate([self._data, np.empty_like(self._data)])
        self._data[self._size] = value
        self._size += 1

    def array(self) -> np.ndarray:
        """The values so far, in order (a read-only view)."""
        view = self._data[: self._size]
        view.flags.writeable = False
        return view


class Stages:
    """Where a new stage of training began: the training-loop fact ``stage``, saved at the
    first step of a ``fit`` of another model (or of one compiled again with another loss; see
    ``core._collections.STAGE``). A rule that compares values over time starts again there:
    what the stage before it learned is another task's, on another scale."""

    def __init__(self, trial: Trial) -> None:
        self.trial = trial
        self._stage = 0  # the stage of the last step asked about
        self._starts: list[int] = []  # the global steps where stages began
        self._version: int | None = None  # the index version they were read at

    def entered(self, step: int) -> bool:
        """True at the first step asked about in a later stage than the step before it."""
        version = getattr(self.trial, "index_version", None)
        if version is None or version != self._version:  # read again when the trial grew
            self._version = version
            has = self.trial.has_tensor(STAGE)
            self._starts = self.trial.tensor(STAGE).steps() if has else []
        if not self._starts:
            return False
        stage = bisect.bisect_right(self._starts, step)
        entered, self._stage = stage > self._stage, max(stage, self._stage)
        return entered


class LossSeries:
    """Turns the steps a rule walks into :class:`Observation` s (see the module docstring).

    ``losses`` are the loss values a rule reads at each step (one per loss saved there, as
    it declared them: :class:`~tensortap.rules._numbers.Scalars`); with ``per_name`` each
    loss is its own series, else a step's losses are averaged into one ("loss").
    """

    def __init__(self, trial: Trial, losses: Scalars, per_name: bool = True) -> None:
        self.trial, self.losses, self.per_name = trial, losses, per_name
        self._pass: _Pass | None = None
        self.history: dict[tuple[str, ModeKeys], list[Observation]] = {}
        self._values_of: dict[tuple[str, ModeKeys], _Values] = {}

    def new_stage(self) -> None:
        """Start again (a new stage of training): no observation before it is compared with
        the ones after."""
        self._pass = None
        self.history = {}
        self._values_of = {}

    def values(self, key: tuple[str, ModeKeys]) -> np.ndarray:
        """The values of ``history[key]`` as an array (see :class:`_Values`)."""
        found = self._values_of.get(key)
        return np.zeros(0) if found is None else found.array()

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
        return self._keep(found)

    def end(self) -> list[Observation]:
        """The evaluation pass under way when training ended, closed now (kept in
        :attr:`history` too): a live walk reads a pass's last step before it knows that
        training ended, so a pass that ends the run is not closed when its step is observed
        (see ``Rule.invoke_at_end``)."""
        return self._keep(self._close())

    def _keep(self, found: list[Observation]) -> list[Observation]:
        for obs in found:
            self.history.setdefault((obs.key, obs.mode), []).append(obs)
            self._values_of.setdefault((obs.key, obs.mode), _Values()).append(obs.value)
        return found

    def _values(self, step: int) -> dict[str, tuple[float, list[str]]]:
        found = list(self.losses.at(step))
        names = [n for n, _ in found]
        values = dict(found)
        if self.per_name or not values:
            return {n: (v, [n]) for n, v in values.items()}
        losses = list(values.values())
        mean = losses[0] if len(losses) == 1 else float(np.mean(losses))
        return {"loss": (mean, names)}

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


#: Standard errors a change must exceed to be told apart from the noise: 3 (one-sided
#: p = 0.99865) where the noise is well known, more where it was estimated from few values
#: (Student's t at the same p, by degrees of freedom).
SIGNIFICANT = 3.0
_T_AT_3_SIGMA = {
    1: 235.8, 2: 19.21, 3: 9.22, 4: 6.62, 5: 5.51, 6: 4.9, 7: 4.53, 8: 4.28, 9: 4.09,
    10: 3.96, 12: 3.76, 15: 3.59, 20: 3.42, 30: 3.27, 60: 3.13, 120: 3.06,
}  # fmt: skip


def critical(degrees_of_freedom: int) -> float:
    """How many standard errors are significant when the noise was estimated with
    ``degrees_of_freedom`` (the table's next lower entry: on the safe side)."""
    if degrees_of_freedom < 1:
        return math.inf
    if degrees_of_freedom > max(_T_AT_3_SIGMA):
        return SIGNIFICANT
    return _T_AT_3_SIGMA[max(k for k in _T_AT_3_SIGMA if k <= degrees_of_freedom)]


def noise(values: Sequence[float] | np.ndarray) -> float:
    """The standard deviation of one value around its local level, from the differences of
    successive values (von Neumann's: the mean square difference is twice the variance), so
    that a slow trend barely counts as noise. A steep stretch (the first steps of training)
    or a spike makes it larger: on the safe side for every verdict built on it."""
    data = _finite(values)
    if data.size < 2:
        return 0.0
    return float(math.sqrt(np.mean(np.diff(data) ** 2) / 2))


def line_noise(values: Sequence[float]) -> tuple[float, int]:
    """(standard deviation, degrees of freedom) of ``values`` about the least-squares line
    through them: the noise of a series that rises or falls steadily."""
    data = np.asarray([v for v in values if math.isfinite(v)], dtype=np.float64)
    if data.size < 3:
        return 0.0, 0
    x = np.arange(data.size, dtype=np.float64)
    slope, intercept = np.polyfit(x, data, 1)
    residuals = data - (slope * x + intercept)
    return float(math.sqrt(np.sum(residuals**2) / (data.size - 2))), int(data.size - 2)


@dataclass(frozen=True)
class Change:
    """How far a series came down from its first window of values to its last: ``start`` and
    ``recent`` are the windows' means (``window`` values each), ``fall`` = start - recent,
    ``se`` its standard error from the series' own step-to-step ``noise``, estimated from
    ``degrees_of_freedom`` differences."""

    start: float
    recent: float
    window: int
    noise: float
    se: float
    degrees_of_freedom: int

    @property
    def critical(self) -> float:
        """How many standard errors are significant here (see :func:`critical`)."""
        return critical(self.degrees_of_freedom)

    @property
    def fall(self) -> float:
        return self.start - self.recent

    @property
    def relative(self) -> float:
        """The fall as a share of where the series started."""
        return self.fall / abs(self.start) if self.start else 0.0

    def significant(self, amount: float) -> bool:
        """Whether ``amount`` (a fall, or minus a rise) is beyond the noise."""
        return amount > self.critical * self.se


def _finite(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """The finite ones of ``values``, in order, as float64 (vectorised for an array)."""
    if isinstance(values, np.ndarray):
        data = np.asarray(values, dtype=np.float64)
        finite = np.isfinite(data)
        return data if finite.all() else data[finite]
    return np.asarray([v for v in values if math.isfinite(v)], dtype=np.float64)


def change(values: Sequence[float] | np.ndarray) -> Change | None:
    """The first third of ``values`` against the last third (None for fewer than 2 values)."""
    data = _finite(values)
    if len(data) < 2:
        return None
    window = max(1, len(data) // 3)
    sigma = noise(data)
    return Change(
        float(np.mean(data[:window])),
        float(np.mean(data[-window:])),
        window,
        sigma,
        sigma * math.sqrt(2.0 / window),
        len(data) - 1,
    )


def pass_ends_at(trial: Trial, step: int) -> bool:
    """Whether the EVAL step ``step`` is the last of its evaluation pass, as far as the trial
    shows: the next saved step is of another mode, or training has ended and none follows."""
    steps = trial.steps()
    i = bisect.bisect_right(steps, step)
    if i < len(steps):
        return bool(trial.mode(steps[i]) != ModeKeys.EVAL)
    return bool(trial.loaded_all_steps)
