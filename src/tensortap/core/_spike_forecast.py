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

from tensortap.core._rolling_scores import RollingScores
from tensortap.exceptions import InvalidConfigError

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
    raised at that step; ``warnings`` lists all of them. Each indicator's scores are kept up
    to date as its window slides (:class:`~tensortap.core._rolling_scores.RollingScores`: a
    few dozen Python operations a step, the same numbers as sorting the window afresh)."""

    config: ForecastConfig = field(default_factory=ForecastConfig)
    warnings: list[SpikeWarning] = field(default_factory=list)

    def __post_init__(self) -> None:
        config = self.config
        self._size = config.recent + config.gap + config.baseline
        self._names: list[str] = []
        self._index: dict[str, int] = {}
        self._windows: list[RollingScores] = []
        self._streak: list[int] = []
        self._armed: list[bool] = []
        self._two_sided: list[bool] = []
        self._level: list[float] = []
        self._trend: list[float] = []
        self._keys: tuple[str, ...] = ()  # the names of the last update, in order ...
        self._rows: list[int] = []  # ... and their rows
        self._calm = 0  # consecutive steps the reference indicators were calm
        self._settled = False  # the fitted warm-up is over, and the run has not relapsed
        self.settled_at: int | None = None  # the step the fitted warm-up first ended at
        self.relapses: list[int] = []  # the steps the run went back into its warm-up

    @property
    def signals(self) -> list[str]:
        return list(self._names)

    def scores(self) -> dict[str, tuple[float, float]]:
        """Each indicator's last (level, trend) scores."""
        return {name: (self._level[i], self._trend[i]) for i, name in enumerate(self._names)}

    def update(self, step: int, values: Mapping[str, float]) -> list[SpikeWarning]:
        """Take one step's indicator values; returns the warnings this step raised. A
        non-finite or non-positive value is skipped (the guard judges those)."""
        keys = tuple(values)
        raw = [float(v) for v in values.values()]
        if keys == self._keys and all(0.0 < v < math.inf for v in raw):
            rows = self._rows  # as usual: the indicators of the last step, all finite
        else:
            rows, kept = [], []
            for name, value in zip(keys, raw, strict=True):
                if not math.isfinite(value) or value <= 0.0:
                    continue
                row = self._index.get(name)
                if row is None:
                    row = self._add(name)
                rows.append(row)
                kept.append(value)
            raw = kept
            self._keys, self._rows = (keys, rows) if len(rows) == len(keys) else ((), [])
        if not rows:
            return []
        raised = self._judge(step, rows, raw)
        self.warnings.extend(raised)
        return raised

    def update_many(self, steps: Iterable[tuple[int, Mapping[str, float]]]) -> list[SpikeWarning]:
        """:meth:`update` over ``(step, values)`` pairs; the warnings they raised."""
        out: list[SpikeWarning] = []
        for step, values in steps:
            out.extend(self.update(step, values))
        return out

    def _add(self, name: str) -> int:
        config = self.config
        row = len(self._names)
        self._names.append(name)
        self._index[name] = row
        self._windows.append(RollingScores(config.recent, config.gap, config.baseline, _MIN_SPREAD))
        self._streak.append(0)
        self._armed.append(True)
        self._two_sided.append(any(part in name for part in config.two_sided))
        self._level.append(0.0)
        self._trend.append(0.0)
        return row

    def _judge(self, step: int, rows: list[int], values: list[float]) -> list[SpikeWarning]:
        config, windows = self.config, self._windows
        need = max(config.warmup or 0, self._size)
        judged: list[tuple[int, float, float, float, float]] = []
        for row, value in zip(rows, values, strict=True):
            window = windows[row]
            log = math.log(value)
            window.push(log)
            if window.count >= need:
                center, level, trend = window.scores()
                self._level[row], self._trend[row] = level, trend
                judged.append((row, log, center, level, trend))
        if not judged or (config.warmup is None and not self._settle(step)):
            return []
        raised: list[SpikeWarning] = []
        level_z, trend_z, persist = config.level_z, config.trend_z, config.persist
        streaks, armed_rows = self._streak, self._armed
        for row, log, center, level, trend in judged:
            down = self._two_sided[row] and level < 0
            if down:
                level, trend = -level, -trend
            streak = streaks[row] + 1 if level >= level_z and trend >= trend_z else 0
            armed = armed_rows[row]
            fire = armed and streak >= persist
            # a disarmed indicator re-arms once its level falls back under half the threshold
            armed_rows[row] = not fire if armed else level < level_z / 2
            streaks[row] = 0 if fire or not armed else streak
            if fire:
                raised.append(
                    SpikeWarning(
                        step=int(step),
                        signal=self._names[row],
                        value=math.exp(log),
                        baseline=math.exp(center),
                        level_z=round(level, 3),
                        trend_z=round(trend, 3),
                        direction="down" if down else "up",
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
        two_sided = [r for r, two in enumerate(self._two_sided) if two]
        level = self._level
        if self._settled:
            if not any(level[r] <= -config.level_z / 2 for r in two_sided):
                return True
            self._settled = False
            self._calm = 0
            self._streak = [0] * len(self._streak)  # a rise under way is not carried over
            self.relapses.append(int(step))
            return False
        if two_sided:  # the model's confidence: no faster than half a warning
            reference, band = two_sided, config.level_z / 2
        else:  # no indicator has moved as fast as a warning
            reference, band = list(range(len(level))), config.level_z
        size, windows = self._size, self._windows
        calm = all(windows[r].count >= size and abs(level[r]) < band for r in reference)
        self._calm = self._calm + 1 if calm else 0
        if self._calm < config.baseline:
            return False
        self._settled = True
        if self.settled_at is None:
            self.settled_at = int(step)
        return True
