"""tensortap: debug machine-learning training while it runs.

Attach a hook to training, read what it saved with a trial (also while training runs).
"""

from tensortap import exceptions, modes
from tensortap.core.collections import Collection, CollectionKeys, CollectionManager
from tensortap.core.reduction_config import ReductionConfig
from tensortap.core.save_config import SaveConfig, SaveConfigMode
from tensortap.hook import Hook, HookStatus
from tensortap.hook_config import HookConfig
from tensortap.trials import StepState, Tensor, Trial, create_trial
from tensortap.writer import WriterOptions

__version__ = "0.1.0"

__all__ = [
    "Collection",
    "CollectionKeys",
    "CollectionManager",
    "Hook",
    "HookConfig",
    "HookStatus",
    "ReductionConfig",
    "SaveConfig",
    "SaveConfigMode",
    "StepState",
    "Tensor",
    "Trial",
    "WriterOptions",
    "__version__",
    "create_trial",
    "exceptions",
    "modes",
]
