"""tensortap for Keras 3 (and TensorFlow 2): ``import tensortap.keras as tt``.

::

    hook = tt.KerasHook(out_dir="runs/job1")
    model.fit(x, y, epochs=3, callbacks=[hook])
    model.evaluate(x_test, y_test, callbacks=[hook])
    trial = tt.create_trial(out_dir="runs/job1")

Its names load at first use (the list is in :mod:`tensortap._faces`): the hook imports Keras
(seconds), which a script that never uses it does not pay for.
"""

from typing import TYPE_CHECKING

from tensortap._faces import face

if TYPE_CHECKING:  # `X as X`: re-exported for type checkers (no static __all__ here)
    from tensortap._shared import *  # noqa: F403
    from tensortap.healing._budget import SkipBudget as SkipBudget
    from tensortap.healing._checkpoints import FunctionCheckpoints as FunctionCheckpoints
    from tensortap.healing._events import GuardEvent as GuardEvent
    from tensortap.healing._rollback import Rollback as Rollback
    from tensortap.healing._rollback import RollbackEvent as RollbackEvent
    from tensortap.healing._skip_batches import SkipBatches as SkipBatches
    from tensortap.keras._guard import Guard as Guard
    from tensortap.keras._hook import OPTIMIZER_VARIABLES as OPTIMIZER_VARIABLES
    from tensortap.keras._hook import KerasHook as KerasHook
    from tensortap.keras._hook import get_hook as get_hook
    from tensortap.keras._rollback import RollbackCallback as RollbackCallback

    Hook = KerasHook

__all__, __getattr__, __dir__ = face(__name__)
