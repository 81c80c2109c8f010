"""tensortap for JAX, Flax and Optax: :class:`Hook` saves pytrees (names from their paths) and
JAX arrays, with statistics computed on the device; :func:`record` is an Optax transformation
that saves statistics of gradients or updates from inside a jitted step.

Its names load at first use (the hook imports JAX, which takes seconds), as the other faces'.
"""

from typing import TYPE_CHECKING

from tensortap._faces import face

if TYPE_CHECKING:  # `X as X`: re-exported for type checkers (no static __all__ here)
    from tensortap._shared import ReductionConfig as ReductionConfig
    from tensortap._shared import SaveConfig as SaveConfig
    from tensortap._shared import create_trial as create_trial
    from tensortap._shared import modes as modes
    from tensortap.healing._budget import SkipBudget as SkipBudget
    from tensortap.healing._checkpoints import FunctionCheckpoints as FunctionCheckpoints
    from tensortap.healing._events import GuardEvent as GuardEvent
    from tensortap.healing._rollback import Rollback as Rollback
    from tensortap.healing._rollback import RollbackEvent as RollbackEvent
    from tensortap.healing._skip_batches import SkipBatches as SkipBatches
    from tensortap.jax._guard import Guard as Guard
    from tensortap.jax._guard import GuardState as GuardState
    from tensortap.jax._hook import Hook as Hook
    from tensortap.jax._hook import get_hook as get_hook
    from tensortap.jax._names import path_name as path_name
    from tensortap.jax._record import record as record

__all__, __getattr__, __dir__ = face(__name__)
