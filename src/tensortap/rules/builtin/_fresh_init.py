"""Shared by FrozenLayer and TrainingLoop: whether weights that never trained still hold a fresh
random initialisation (never trained, nor loaded from a trained model)."""

from __future__ import annotations

from typing import Any

import numpy as np

#: a weight is judged fresh from its values only with at least this many of them
FRESH_MIN = 256


def uniform_bound(value: np.ndarray) -> tuple[int, float | None]:
    """(the number of values, the bound b where they look drawn evenly from [-b, b], else None).
    Evenly spread values have a kurtosis of 1.8 and their largest magnitude is sqrt(3) standard
    deviations; trained weights grow tails beyond both."""
    flat = value.ravel()
    n = flat.size
    if n < FRESH_MIN or not np.all(np.isfinite(flat)):
        return n, None
    centred = flat - flat.mean()
    std = float(np.sqrt(np.mean(centred**2)))
    if std == 0.0:
        return n, None
    kurtosis = float(np.mean(centred**4)) / std**4
    largest = float(np.abs(centred).max())
    root = np.sqrt(n)
    # the limits hold 99.9% of evenly drawn values' ratios, and 4 of their kurtosis's standard
    # errors (1.17/sqrt(n)): measured on 4,000 draws of 256, 1,024 and 4,608 values
    if largest / std > np.sqrt(3.0) * (1 + 2.5 / root) or abs(kurtosis - 1.8) > 4.7 / root:
        return n, None
    return n, largest


class FreshInit:
    """Judges weights of a trial that never trained (frozen): whether, for 90% of their values
    (in weights of at least ``FRESH_MIN`` values, together at least that many), they are spread
    evenly within a bound as the default uniform initialisations leave them (PyTorch's Linear,
    convolution and recurrent layers, Keras's Glorot): the largest magnitude within sampling
    noise of sqrt(3) standard deviations, the kurtosis near 1.8. Training, even briefly, grows
    tails beyond them (the weights of pre-trained layers frozen on purpose in the development
    split: 1.96 to 3.5 standard deviations). Each weight is read once (it does not change)."""

    def __init__(self, trial: Any) -> None:
        self._trial = trial
        self._seen: dict[str, tuple[int, float | None]] = {}  # name -> (size, bound or None)

    def verdict(self, names: list[str], step: int | None = None) -> str | None:
        """How the weights ``names`` show a fresh random initialisation, or None: read at
        ``step`` (else at each one's last saved step); names not saved are left out."""
        fresh = sized = 0
        bounds: list[float] = []
        for name in names:
            seen = self._seen.get(name)
            if seen is None:
                value = self._value(name, step)
                seen = self._seen[name] = (0, None) if value is None else uniform_bound(value)
            size, bound = seen
            if size < FRESH_MIN:
                continue
            sized += size
            if bound is not None:
                fresh += size
                bounds.append(bound)
        if sized < FRESH_MIN or fresh < 0.9 * sized:
            return None
        return (
            f"{fresh} of their values spread evenly within ±{min(bounds):.3g} to "
            f"±{max(bounds):.3g}, as a default uniform initialisation leaves them"
        )

    def _value(self, name: str, step: int | None) -> np.ndarray | None:
        trial = self._trial
        if name not in trial.tensor_names():
            return None
        tensor = trial.tensor(name)
        if step is None:
            steps = tensor.steps()
            if not steps:
                return None
            step = steps[-1]
        try:
            return np.asarray(tensor.value(step), dtype=np.float64)
        except Exception:
            return None
