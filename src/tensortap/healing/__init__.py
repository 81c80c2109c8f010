"""Healing that every framework adapter shares, NumPy only: a guard's robust window and its
decision (:func:`score`, :class:`RobustWindow`), the skip budget (:class:`SkipBudget`), and
the host-side record of trips (:class:`GuardLog`, :class:`GuardEvent`).

The JAX/Optax guard (``tensortap.jax.guard``) runs :func:`score` inside ``jit`` with
``jax.numpy``; the Keras guard (``tensortap.keras.Guard``) runs it with NumPy between batches.
See docs/jax.md and docs/keras.md, "A guard that skips bad updates".
"""

from tensortap.healing._budget import Exhausted, SkipBudget, SkipWindow
from tensortap.healing._events import GuardEvent, GuardLog, GuardStatus
from tensortap.healing._options import GuardSettings
from tensortap.healing._window import (
    BITS,
    GRAD_NORM,
    LOSS,
    MEDIAN,
    SIGNALS,
    SKIPPED,
    UPDATE_NORM,
    WIDTH,
    RobustWindow,
    Z,
    score,
)

__all__ = [
    "BITS",
    "GRAD_NORM",
    "LOSS",
    "MEDIAN",
    "SIGNALS",
    "SKIPPED",
    "UPDATE_NORM",
    "WIDTH",
    "Exhausted",
    "GuardEvent",
    "GuardLog",
    "GuardSettings",
    "GuardStatus",
    "RobustWindow",
    "SkipBudget",
    "SkipWindow",
    "Z",
    "score",
]
