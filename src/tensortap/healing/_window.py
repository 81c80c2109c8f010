"""A guard's decision, written once for any array library with NumPy's API (NumPy on the
host, ``jax.numpy`` inside ``jit``): each step's loss, gradient norm and update norm scored
against a robust window of the last accepted steps.

The rule is the PyTorch guard's (:mod:`tensortap.pytorch._guard_device`): the median and the
MAD over the window's finite entries; a signal is a spike when it is more than ``spike_z``
robust standard deviations (1.4826 MAD) above the median *and* more than ``spike_ratio`` times
it, once the window holds ``warmup`` finite values; a non-finite value always trips. A tripped
step does not enter the window, nor does a non-finite value (entries are NaN until filled and
NaN entries are masked out), so one NaN cannot make the statistics NaN.

One step's row of statistics, :data:`WIDTH` numbers, as the PyTorch guard lays it out:
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

LOSS, GRAD_NORM, UPDATE_NORM = 0, 1, 2
MEDIAN = 3  #: 3, 4, 5: the window's medians of the loss, gradient norm, update norm
Z = 6  #: 6, 7, 8: their robust z-scores (NaN in the warm-up)
BITS = 9  #: 9..14: the reasons, 1.0 or 0.0: non-finite loss, gradient norm, update norm;
#: spike of the loss, gradient norm, update norm
SKIPPED = 15  #: 1.0 when the update was undone
WIDTH = 16
SIGNALS = ("loss", "grad_norm", "update_norm")
_TINY = float(np.finfo(np.float32).tiny)


def score(
    xp: Any,
    window: Any,
    values: Any,
    present: Any,
    judged: Any,
    *,
    warmup: int,
    spike_z: float,
    spike_ratio: float,
) -> tuple[Any, Any, Any, Any]:
    """One step's decision against ``window`` (3 x N, NaN where empty), with ``xp`` the array
    module (``numpy`` or ``jax.numpy``; only functions both have, no in-place writes).

    ``values``: the loss, gradient norm and update norm; ``present``, ``judged``: 3 booleans,
    whether each was measured and whether its spikes are judged. Returns ``(median, z, bits,
    fresh)``: the window's medians, the robust z-scores (NaN in the warm-up), the six 0/1
    reasons (non-finite, then spike, per signal) and what enters the window if the step is
    kept (NaN where absent or not finite)."""
    size = window.shape[1]
    valid = xp.isfinite(window)
    count = valid.sum(axis=1)
    low = (xp.maximum(count - 1, 0) // 2)[:, None]
    high = xp.minimum(count // 2, size - 1)[:, None]

    def middle(rows: Any) -> Any:
        ordered = xp.sort(xp.where(valid, rows, xp.inf), axis=1)
        picked = xp.take_along_axis(ordered, low, axis=1) + xp.take_along_axis(
            ordered, high, axis=1
        )
        return (picked / 2)[:, 0]

    median = middle(window)
    mad = middle(xp.abs(window - median[:, None]))
    scale = xp.maximum(xp.maximum(1.4826 * mad, 1e-12 * xp.abs(median)), _TINY)
    warm = count >= warmup
    finite = xp.isfinite(values)
    z = xp.where(warm, (values - median) / scale, xp.nan)
    spike = warm & finite & present & judged & (z > spike_z) & (values > spike_ratio * median)
    nonfinite = present & ~finite
    bits = xp.concatenate([nonfinite, spike]).astype(values.dtype)
    fresh = xp.where(finite & present, values, xp.nan)
    return xp.where(count > 0, median, xp.nan), z, bits, fresh


def accept(xp: Any, window: Any, head: Any, fresh: Any, kept: Any) -> tuple[Any, Any]:
    """The window and its head after a step: ``fresh`` written at ``head`` and the head moved
    on when ``kept``, else both unchanged (no in-place writes: works inside ``jit``)."""
    size = window.shape[1]
    at = (xp.arange(size) == head)[None, :] & kept
    return xp.where(at, fresh[:, None], window), (head + xp.asarray(kept).astype(head.dtype)) % size


class RobustWindow:
    """The window on the host (NumPy), for guards that decide between steps (Keras).
    :meth:`judge` scores a step and, unless it tripped, lets it in."""

    def __init__(
        self,
        *,
        window: int,
        warmup: int,
        spike_z: float,
        spike_ratio: float,
        signals: Sequence[str] = SIGNALS,
    ) -> None:
        self.warmup, self.spike_z, self.spike_ratio = warmup, float(spike_z), float(spike_ratio)
        self.judged = np.array([s in signals for s in SIGNALS])
        self.values = np.full((len(SIGNALS), window), np.nan)
        self.head = np.int64(0)

    def judge(self, values: Sequence[float | None], *, undo: bool = True) -> np.ndarray:
        """The step's row (:data:`WIDTH` numbers) for ``values`` (the loss, gradient norm,
        update norm; None where not measured); a kept step enters the window. ``undo``: whether
        a trip undoes the update (its SKIPPED column)."""
        present = np.array([v is not None for v in values])
        measured = np.array([np.nan if v is None else float(v) for v in values])
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            median, z, bits, fresh = score(
                np,
                self.values,
                measured,
                present,
                self.judged,
                warmup=self.warmup,
                spike_z=self.spike_z,
                spike_ratio=self.spike_ratio,
            )
        tripped = bool(bits.max() > 0)
        self.values, self.head = accept(np, self.values, self.head, fresh, not tripped)
        skipped = np.array([1.0 if tripped and undo else 0.0])
        return np.concatenate([measured, median, z, bits, skipped])


__all__ = [
    "BITS",
    "GRAD_NORM",
    "LOSS",
    "MEDIAN",
    "SIGNALS",
    "SKIPPED",
    "UPDATE_NORM",
    "WIDTH",
    "RobustWindow",
    "Z",
    "accept",
    "score",
]
