"""Healing that every framework adapter shares, NumPy only: a guard's robust window and its
decision (:func:`score`, :class:`RobustWindow`), the skip budget (:class:`SkipBudget`), and
the host-side record of trips (:class:`GuardLog`, :class:`GuardEvent`), and the rollback
(:class:`Rollback`: the request seam, the decision from a replay's evidence, the last good
checkpoint through :class:`FunctionCheckpoints`, :class:`MemoryCheckpoints` or a framework's own
:class:`Checkpoints`, the
batch stream with its skip list, :class:`SkipBatches`, and the branch session).

The JAX/Optax guard (``tensortap.jax.guard``) runs :func:`score` inside ``jit`` with
``jax.numpy``; the Keras guard (``tensortap.keras.Guard``) runs it with NumPy between batches.
See docs/jax.md and docs/keras.md, "A guard that skips bad updates".
"""

from tensortap.healing._budget import Exhausted, SkipBudget, SkipWindow
from tensortap.healing._checkpoints import Checkpoints, FunctionCheckpoints, MemoryCheckpoints
from tensortap.healing._events import GuardEvent, GuardLog, GuardStatus
from tensortap.healing._options import GuardSettings
from tensortap.healing._rollback import Rollback, RollbackEvent
from tensortap.healing._skip_batches import SkipBatches
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
    "Checkpoints",
    "Exhausted",
    "FunctionCheckpoints",
    "GuardEvent",
    "GuardLog",
    "GuardSettings",
    "GuardStatus",
    "MemoryCheckpoints",
    "RobustWindow",
    "Rollback",
    "RollbackEvent",
    "SkipBatches",
    "SkipBudget",
    "SkipWindow",
    "Z",
    "score",
]
