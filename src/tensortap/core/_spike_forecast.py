"""A forecast of loss spikes from cheap leading indicators (NumPy only).

Update-norm spikes and growing attention logits come before loss spikes in large runs (the
Marin 32B retrospective; QK-clip exists because max attention logits grow before divergence).
:class:`SpikeForecast` watches any number of such per-step indicators (positive numbers: an
update norm per layer group, a max attention logit, the output's max logit and entropy) and
warns when one of them starts to rise faster than it did before in this run.

Every threshold is fitted per run from the indicator's own history; none is a constant factor
of a value. For each indicator, on the logarithm of its values:

- the *baseline* is the ``baseline`` steps that ended ``gap`` steps before the ``recent`` ones;
  its median and its MAD (scaled to a standard deviation) are the run's own level and spread
  (the gap keeps the start of a rise out of the baseline while it is judged: a baseline that
  took it in would widen with it and hide it);
- the *level* score is how many baseline deviations the median of the ``recent`` steps lies
  above the baseline's median. A steady exponential trend (a line in log) scores about 2.9
  (with the default windows) whatever its slope: what scores high is a rise *faster* than
  the run's own recent past;
- the *trend* score is the Mann-Kendall statistic of the ``recent`` steps (a rank test: how
  many later values exceed earlier ones, as a normal z-score), so one outlier does not warn;
- a warning is raised when both exceed their thresholds (``level_z``, ``trend_z``) at
  ``persist`` consecutive steps, once the run's warm-up is over. It is re-armed when the level
  score falls back under half its threshold.

The *warm-up* is fitted per run (``warmup=None``, the default): early training is not
stationary (a small GPT's embedding update norms rise by half as it learns to copy, a phase
change, not a coming spike), so nothing is judged until the run has *settled*: until the
reference indicators' level scores have stayed within half the level threshold
(``|level| < level_z / 2``) for ``baseline`` consecutive steps. The reference is the two-sided
indicators (the output's entropy: the model's confidence, which falls fast while it is still
learning something new) when there are any; else every indicator, within the level threshold
itself (none has moved as fast as a warning: half of it would hold back an indicator that
falls steadily and quietly, which scores about 2.9). :attr:`SpikeForecast.settled_at` is the
step it first settled.

A calm plateau looks settled too, and learning may start again after it (the small GPT's
phase change can come after 200 calm steps of its entropy). So settled is a state, not an
event: a settled run *relapses* into its warm-up when its entropy (a two-sided reference)
falls by half the level threshold or more, the model's confidence growing fast as it learns
something new; what rises with it (the embeddings' update norms) is part of that, not a
coming spike. Nothing is judged until it has settled again, as the first time
(:attr:`SpikeForecast.relapses` lists the steps). A rising entropy does not relapse (the data
turning to noise is judged as before); without a two-sided indicator nothing relapses.
``warmup=<steps>`` fixes the warm-up instead: judged from then on, both ways.

Indicators marked two-sided (the output's entropy, which falls as a model grows
over-confident and rises when the data turn to noise) are judged in both directions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tensortap.exceptions import InvalidConfigError

#: MAD to standard deviation of a normal distribution.
_MAD_TO_SD = 1.4826
#: The smallest spread a baseline is given (in log units: 0.1 %), so a constant series
#: (a frozen layer, a fixed learning rate) does not turn rounding noise into a warning.
_MIN_SPREAD = 1e-3


@dataclass(frozen=True)
class ForecastConfig:
    """How :class:`SpikeForecast` judges each indicator (see the module docstring)."""

    recent: int = 25
    gap: int = 100
    baseline: int = 200
    warmup: int | None = None
    level_z: float = 5.0
    trend_z: float = 3.5
    persist: int = 5
    two_sided: tuple[str, ...] = ("entropy",)

    def __post_init__(self) -> None:
        for name in ("recent", "gap", "baseline", "warmup", "persist"):
            value = getattr(self, name)
            if name == "warmup" and value is None:
                continue  # fitted per run
            least = 0 if name == "gap" else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                fitted = " (or None: fitted per run)" if name == "warmup" else ""
                raise InvalidConfigError(
                    f"ForecastConfig.{name} must be an int of at least {least} (steps){fitted}, "
                    f"got {value!r}"
                )
        if self.recent < 8:
            raise InvalidConfigError(
                f"ForecastConfig.recent must be at least 8 steps for the trend test, "
                f"got {self.recent}"
            )
        for name in ("level_z", "trend_z"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise InvalidConfigError(
                    f"ForecastConfig.{name} must be a positive number of deviations, got {value!r}"
                )
        sides: object = self.two_sided
        if not isinstance(sides, tuple | list) or not all(isinstance(s, str) for s in sides):
            raise InvalidConfigError(
                "ForecastConfig.two_sided must be a tuple of substrings of indicator names, "
                f"got {self.two_sided!r}"
            )
        object.__setattr__(self, "two_sided", tuple(self.two_sided))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["two_sided"] = list(self.two_sided)
        return out

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> ForecastConfig:
        return cls(**{**values, "two_sided": tuple(values.get("two_sided", ("entropy",)))})


@dataclass(frozen=True)
class SpikeWarning:
    """One warning: at ``step`` the indicator ``signal`` rose (or, two-sided, fell) faster
    than its own history: ``level_z`` baseline deviations from the baseline's median (in
    log), a Mann-Kendall ``trend_z``; ``value`` and ``baseline`` are in the indicator's units."""

    step: int
    signal: str
    value: float
    baseline: float
    level_z: float
    trend_z: float
    direction: str = "up"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        moving = "rising" if self.direction == "up" else "falling"
        return (
            f"step {self.step}: {self.signal} is {moving}"
            f" ({self.value:.4g}, its baseline {self.baseline:.4g}: {self.level_z:+.1f} "
            f"deviations, trend z {self.trend_z:+.1f}); a loss spike may follow"
        )


def mann_kendall_z(values: np.ndarray) -> float:
    """The Mann-Kendall trend statistic of ``values`` in order, as a z-score (no ties
    correction: the values are real numbers)."""
    return float(_mann_kendall_rows(np.asarray(values, dtype=float)[None, :])[0])


def _median_rows(rows: np.ndarray) -> np.ndarray:
    """The median of each row (``np.median(rows, axis=1)`` without its overhead: one
    partition)."""
    n = rows.shape[1]
    half = n // 2
    if n % 2:
        return np.partition(rows, half, axis=1)[:, half]
    parted = np.partition(rows, (half - 1, half), axis=1)
    return 0.5 * (parted[:, half - 1] + parted[:, half])


_PAIRS: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _mann_kendall_rows(rows: np.ndarray) -> np.ndarray:
    """:func:`mann_kendall_z` of each row of ``rows`` at once."""
    n = rows.shape[1]
    if n < 3:
        return np.zeros(len(rows))
    pairs = _PAIRS.get(n)
    if pairs is None:
        pairs = _PAIRS.setdefault(n, np.triu_indices(n, 1))
    earlier, later = pairs
    s = np.sign(rows[:, later] - rows[:, earlier]).sum(axis=1)
    variance = n * (n - 1) * (2 * n + 5) / 18.0
    return np.where(s == 0, 0.0, (s - np.sign(s)) / math.sqrt(variance))


@dataclass
class SpikeForecast:
    """Watches per-step indicators and warns before a loss spike (see the module docstring).

    ``update(step, {"update_norm/blocks.0": 0.02, ...})`` at each step returns the warnings
    raised at that step; ``warnings`` lists all of them. All indicators are judged together,
    one NumPy operation over the indicators per statistic (rows of one ring buffer), so the
    cost of a step hardly grows with their number."""

    config: ForecastConfig = field(default_factory=ForecastConfig)
    warnings: list[SpikeWarning] = field(default_factory=list)

    def __post_init__(self) -> None:
        config = self.config
        self._size = config.recent + config.gap + config.baseline
        self._names: list[str] = []
        self._index: dict[str, int] = {}
        self._ring = np.empty((0, self._size))
        self._count = np.zeros(0, dtype=np.int64)  # finite values seen, per indicator
        self._streak = np.zeros(0, dtype=np.int64)
        self._armed = np.zeros(0, dtype=bool)
        self._two_sided = np.zeros(0, dtype=bool)
        self._level = np.zeros(0)
        self._trend = np.zeros(0)
        self._offsets = np.arange(self._size)
        self._calm = 0  # consecutive steps the reference indicators were calm
        self._settled = False  # the fitted warm-up is over, and the run has not relapsed
        self.settled_at: int | None = None  # the step the fitted warm-up first ended at
        self.relapses: list[int] = []  # the steps the run went back into its warm-up

    @property
    def signals(self) -> list[str]:
        return list(self._names)

    def scores(self) -> dict[str, tuple[float, float]]:
        """Each indicator's last (level, trend) scores."""
        return {
            name: (float(self._level[i]), float(self._trend[i]))
            for i, name in enumerate(self._names)
        }

    def update(self, step: int, values: Mapping[str, float]) -> list[SpikeWarning]:
        """Take one step's indicator values; returns the warnings this step raised. A
        non-finite or non-positive value is skipped (the guard judges those)."""
        rows: list[int] = []
        logs: list[float] = []
        for name, raw in values.items():
            value = float(raw)
            if not math.isfinite(value) or value <= 0.0:
                continue
            row = self._index.get(name)
            if row is None:
                row = self._add(name)
            rows.append(row)
            logs.append(math.log(value))
        if not rows:
            return []
        raised = self._judge(step, np.array(rows), np.array(logs))
        self.warnings.extend(raised)
        return raised

    def update_many(self, steps: Iterable[tuple[int, Mapping[str, float]]]) -> list[SpikeWarning]:
        """:meth:`update` over ``(step, values)`` pairs; the warnings they raised."""
        out: list[SpikeWarning] = []
        for step, values in steps:
            out.extend(self.update(step, values))
        return out

    def _add(self, name: str) -> int:
        row = len(self._names)
        self._names.append(name)
        self._index[name] = row
        self._ring = np.vstack((self._ring, np.empty((1, self._size))))
        self._count = np.append(self._count, 0)
        self._streak = np.append(self._streak, 0)
        self._armed = np.append(self._armed, True)
        self._two_sided = np.append(
            self._two_sided, any(part in name for part in self.config.two_sided)
        )
        self._level = np.append(self._level, 0.0)
        self._trend = np.append(self._trend, 0.0)
        return row

    def _judge(self, step: int, rows: np.ndarray, logs: np.ndarray) -> list[SpikeWarning]:
        config, size = self.config, self._size
        count = self._count
        self._ring[rows, count[rows] % size] = logs
        count[rows] += 1
        ready = count[rows] >= max(config.warmup or 0, size)
        if not ready.any():
            return []
        rows, logs = rows[ready], logs[ready]
        # each row oldest first: its ring read from its own write position (one index for
        # all rows when, as usual, every indicator has as many values)
        first = count[rows]
        if (first == first[0]).all():
            ordered = self._ring[rows][:, (first[0] + self._offsets) % size]
        else:
            order = (first[:, None] + self._offsets[None, :]) % size
            ordered = np.take_along_axis(self._ring[rows], order, axis=1)
        base, recent = ordered[:, : config.baseline], ordered[:, -config.recent :]
        center = _median_rows(base)
        spread = np.maximum(_MAD_TO_SD * _median_rows(np.abs(base - center[:, None])), _MIN_SPREAD)
        level = (_median_rows(recent) - center) / spread
        trend = _mann_kendall_rows(recent)
        self._level[rows], self._trend[rows] = level, trend
        if config.warmup is None and not self._settle(step):
            return []
        down = self._two_sided[rows] & (level < 0)
        level = np.where(down, -level, level)
        trend = np.where(down, -trend, trend)
        hot = (level >= config.level_z) & (trend >= config.trend_z)
        streak = np.where(hot, self._streak[rows] + 1, 0)
        armed = self._armed[rows]
        fire = armed & (streak >= config.persist)
        # a disarmed indicator re-arms once its level falls back under half the threshold
        self._armed[rows] = np.where(armed, ~fire, level < config.level_z / 2)
        self._streak[rows] = np.where(fire | ~armed, 0, streak)
        raised: list[SpikeWarning] = []
        for i in np.flatnonzero(fire):
            raised.append(
                SpikeWarning(
                    step=int(step),
                    signal=self._names[int(rows[i])],
                    value=math.exp(float(logs[i])),
                    baseline=math.exp(float(center[i])),
                    level_z=round(float(level[i]), 3),
                    trend_z=round(float(trend[i]), 3),
                    direction="down" if down[i] else "up",
                )
            )
        return raised

    def _settle(self, step: int) -> bool:
        """The fitted warm-up: True while the run is settled. It settles once the reference
        indicators (the two-sided ones, else all) have been within half the level threshold
        (else within it) for ``baseline`` steps in a row. A settled run relapses into its
        warm-up when a two-sided reference falls by half the level threshold or more (the
        model's confidence growing fast: it is learning something new, a phase change, and
        what rises with it is part of that), and settles again as it did the first time."""
        config = self.config
        two_sided = self._two_sided
        if self._settled:
            if not (two_sided.any() and (self._level[two_sided] <= -config.level_z / 2).any()):
                return True
            self._settled = False
            self._calm = 0
            self._streak[:] = 0  # a rise under way when it relapsed is not carried over
            self.relapses.append(int(step))
            return False
        if two_sided.any():  # the model's confidence: no faster than half a warning
            reference, band = two_sided, config.level_z / 2
        else:  # no indicator has moved as fast as a warning
            reference, band = np.ones_like(two_sided), config.level_z
        judged = self._count >= self._size
        calm = bool((judged | ~reference).all() and (np.abs(self._level[reference]) < band).all())
        self._calm = self._calm + 1 if calm else 0
        if self._calm < config.baseline:
            return False
        self._settled = True
        if self.settled_at is None:
            self.settled_at = int(step)
        return True
