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


#: an orthogonal initialisation's rows (or columns) are orthonormal up to float32 rounding:
#: their Gram matrix is within this of the identity
ORTHOGONAL_TOLERANCE = 1e-3


def orthogonal(value: np.ndarray) -> bool:
    """Whether ``value`` (flattened to a matrix over its last axis, as Keras's ``Orthogonal``
    makes it) has orthonormal rows or columns, whichever are fewer (at least 8): how Keras
    starts its recurrent kernels (``Orthogonal(gain=1.0)``, as ``nn.init.orthogonal_``).
    Training, even briefly, moves them off it (a fresh GRU recurrent kernel: 4e-7 of its
    diagonal; its input kernel, uniform: 0.2). A gain other than 1 (a recurrent matrix scaled
    to 1.2 on purpose, or by mistake) is a choice, not a default initialisation left alone."""
    if value.ndim < 2 or value.size < FRESH_MIN or not np.all(np.isfinite(value)):
        return False
    matrix = value.reshape(-1, value.shape[-1])
    if matrix.shape[0] > matrix.shape[1]:
        matrix = matrix.T
    if matrix.shape[0] < 8:
        return False
    gram = matrix @ matrix.T
    off = np.abs(gram - np.eye(len(gram))).max()
    return bool(off <= ORTHOGONAL_TOLERANCE)


class FreshInit:
    """Judges weights of a trial that never trained (frozen): whether, for 90% of their values
    (in weights of at least ``FRESH_MIN`` values, together at least that many), they are spread
    evenly within a bound as the default uniform initialisations leave them (PyTorch's Linear,
    convolution and recurrent layers, Keras's Glorot): the largest magnitude within sampling
    noise of sqrt(3) standard deviations, the kurtosis near 1.8; or are :func:`orthogonal`, as
    Keras's recurrent kernels start. Training, even briefly, grows tails beyond them (the
    weights of pre-trained layers frozen on purpose in the development split: 1.96 to 3.5
    standard deviations). Each weight is read once (it does not change)."""

    def __init__(self, trial: Any) -> None:
        self._trial = trial
        # name -> (size, the uniform bound or None, orthogonal)
        self._seen: dict[str, tuple[int, float | None, bool]] = {}

    def verdict(self, names: list[str], step: int | None = None) -> str | None:
        """How the weights ``names`` show a fresh random initialisation, or None: read at
        ``step`` (else at each one's last saved step); names not saved are left out."""
        fresh = sized = square = 0
        bounds: list[float] = []
        for name in names:
            size, bound, orthonormal = self._judged(name, step)
            if size < FRESH_MIN:
                continue
            sized += size
            if bound is not None:
                fresh += size
                bounds.append(bound)
            elif orthonormal:
                fresh += size
                square += size
        if sized < FRESH_MIN or fresh < 0.9 * sized:
            return None
        parts = []
        if bounds:
            parts.append(
                f"{fresh - square} of their values spread evenly within ±{min(bounds):.3g} to "
                f"±{max(bounds):.3g}, as a default uniform initialisation leaves them"
            )
        if square:
            parts.append(
                f"{square} in orthogonal matrices, as an orthogonal initialisation leaves them"
            )
        return "; ".join(parts)

    def _judged(self, name: str, step: int | None) -> tuple[int, float | None, bool]:
        seen = self._seen.get(name)
        if seen is None:
            value = self._value(name, step)
            if value is None:
                seen = (0, None, False)
            else:
                size, bound = uniform_bound(value)
                seen = (size, bound, bound is None and orthogonal(value))
            self._seen[name] = seen
        return seen

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
