"""tensortap for PyTorch: ``import tensortap.pytorch as tt``.

::

    hook = tt.Hook(out_dir="runs/job1", save_config=tt.SaveConfig(save_interval=10),
                   include_collections=["weights", "gradients", "losses", "relu_activations"])
    hook.register_module(model)
    hook.register_loss(loss_fn)
"""

from tensortap import exceptions, modes
from tensortap.core.collections import Collection, CollectionKeys
from tensortap.core.reduction_config import ReductionConfig
from tensortap.core.save_config import SaveConfig, SaveConfigMode
from tensortap.hook_config import HookConfig
from tensortap.pytorch.guard import Guard, GuardEvent, GuardStatus
from tensortap.pytorch.hook import Hook, get_hook
from tensortap.pytorch.naming import OPTIMIZER_VARIABLES, RELU_ACTIVATIONS
from tensortap.trials import Trial, create_trial
from tensortap.writer import WriterOptions

__all__ = [
    "OPTIMIZER_VARIABLES",
    "RELU_ACTIVATIONS",
    "Collection",
    "CollectionKeys",
    "Guard",
    "GuardEvent",
    "GuardStatus",
    "Hook",
    "HookConfig",
    "ReductionConfig",
    "SaveConfig",
    "SaveConfigMode",
    "Trial",
    "WriterOptions",
    "create_trial",
    "exceptions",
    "get_hook",
    "modes",
]
