"""tensortap for PyTorch: ``import tensortap.pytorch as tt``.

::

    hook = tt.Hook(out_dir="runs/job1", save_config=tt.SaveConfig(save_interval=10),
                   include_collections=["weights", "gradients", "losses", "relu_activations"])
    hook.register_module(model)
    hook.register_loss(loss_fn)

Its names load at first use (the list is in :mod:`tensortap._faces`).
"""

from typing import TYPE_CHECKING

from tensortap._faces import face

if TYPE_CHECKING:
    from tensortap._shared import *  # noqa: F403
    from tensortap.pytorch.checkpoints import (  # noqa: F401
        DistributedCheckpoints,
        FunctionCheckpoints,
    )
    from tensortap.pytorch.guard import Guard, GuardEvent, GuardStatus  # noqa: F401
    from tensortap.pytorch.hook import Hook, get_hook  # noqa: F401
    from tensortap.pytorch.naming import OPTIMIZER_VARIABLES, RELU_ACTIVATIONS  # noqa: F401
    from tensortap.pytorch.rollback import Rollback, RollbackEvent  # noqa: F401
    from tensortap.pytorch.skip_batches import SkipBatches  # noqa: F401

__all__, __getattr__, __dir__ = face(__name__)
