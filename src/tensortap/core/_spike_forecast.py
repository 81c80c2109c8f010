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
  ``persist`` consecutive steps, once the indicator has ``warmup`` finite values. It is
  re-armed when the level score falls back under half its threshold.

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
    warmup: int = 800
    level_z: float = 5.0
    trend_z: float = 3.5
    persist: int = 5
    two_sided: tuple[str, ...] = ("entropy",)

    def __post_init__(self) -> None:
        for name in ("recent", "gap", "baseline", "warmup", "persist"):
            value = getattr(self, name)
            least = 0 if name == "gap" else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise InvalidConfigError(
                    f"ForecastConfig.{name} must be an int of at least {least} (steps), "
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


@dataclass
class _Track:
    """One indicator's ring of log values and its state."""

    values: np.ndarray
    count: int = 0  # finite values seen
    streak: int = 0
    armed: bool = True
    last_level: float = 0.0
    last_trend: float = 0.0
    two_sided: bool = False
    direction: str = "up"


def mann_kendall_z(values: np.ndarray) -> float:
    """The Mann-Kendall trend statistic of ``values`` in order, as a z-score (no ties
    correction: the values are real numbers)."""
    n = len(values)
    if n < 3:
        return 0.0
    diff = values[None, :] - values[:, None]
    s = float(np.sign(diff[np.triu_indices(n, 1)]).sum())
    variance = n * (n - 1) * (2 * n + 5) / 18.0
    if s == 0:
        return 0.0
    return (s - math.copysign(1.0, s)) / math.sqrt(variance)


@dataclass
class SpikeForecast:
    """Watches per-step indicators and warns before a loss spike (see the module docstring).

    ``update(step, {"update_norm/blocks.0": 0.02, ...})`` at each step returns the warnings
    raised at that step; ``warnings`` lists all of them."""

    config: ForecastConfig = field(default_factory=ForecastConfig)
    warnings: list[SpikeWarning] = field(default_factory=list)
    _tracks: dict[str, _Track] = field(default_factory=dict)

    @property
    def signals(self) -> list[str]:
        return list(self._tracks)

    def scores(self) -> dict[str, tuple[float, float]]:
        """Each indicator's last (level, trend) scores."""
        return {k: (t.last_level, t.last_trend) for k, t in self._tracks.items()}

    def update(self, step: int, values: Mapping[str, float]) -> list[SpikeWarning]:
        """Take one step's indicator values; returns the warnings this step raised. A
        non-finite or non-positive value is skipped (the guard judges those)."""
        raised: list[SpikeWarning] = []
        for name, raw in values.items():
            value = float(raw)
            if not math.isfinite(value) or value <= 0.0:
                continue
            track = self._tracks.get(name)
            if track is None:
                track = self._new_track(name)
            warning = self._judge(step, name, track, math.log(value))
            if warning is not None:
                raised.append(warning)
        self.warnings.extend(raised)
        return raised

    def update_many(self, steps: Iterable[tuple[int, Mapping[str, float]]]) -> list[SpikeWarning]:
        """:meth:`update` over ``(step, values)`` pairs; the warnings they raised."""
        out: list[SpikeWarning] = []
        for step, values in steps:
            out.extend(self.update(step, values))
        return out

    def _new_track(self, name: str) -> _Track:
        size = self.config.recent + self.config.gap + self.config.baseline
        two_sided = any(part in name for part in self.config.two_sided)
        track = _Track(values=np.empty(size), two_sided=two_sided)
        self._tracks[name] = track
        return track

    def _judge(self, step: int, name: str, track: _Track, log_value: float) -> SpikeWarning | None:
        config = self.config
        size = len(track.values)
        track.values[track.count % size] = log_value
        track.count += 1
        if track.count < max(config.warmup, size):
            return None
        start = track.count % size  # the oldest value
        ordered = np.concatenate((track.values[start:], track.values[:start]))
        base, recent = ordered[: config.baseline], ordered[-config.recent :]
        center = float(np.median(base))
        spread = max(_MAD_TO_SD * float(np.median(np.abs(base - center))), _MIN_SPREAD)
        level = (float(np.median(recent)) - center) / spread
        trend = mann_kendall_z(recent)
        track.last_level, track.last_trend = level, trend
        direction = "up"
        if track.two_sided and level < 0:
            level, trend, direction = -level, -trend, "down"
        if level >= config.level_z and trend >= config.trend_z:
            track.streak += 1
        else:
            track.streak = 0
        if not track.armed:
            if level < config.level_z / 2:
                track.armed = True
            return None
        if track.streak < config.persist:
            return None
        track.armed, track.streak = False, 0
        return SpikeWarning(
            step=int(step),
            signal=name,
            value=math.exp(log_value),
            baseline=math.exp(center),
            level_z=round(level, 3),
            trend_z=round(trend, 3),
            direction=direction,
        )
