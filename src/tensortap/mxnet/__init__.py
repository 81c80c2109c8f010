"""tensortap for MXNet Gluon (1.9): ``import tensortap.mxnet as tt``.

::

    hook = tt.Hook(out_dir="runs/job1", save_config=tt.SaveConfig(save_interval=10),
                   include_collections=["weights", "gradients", "losses", "relu_activations"])
    hook.register_block(net)
    hook.register_loss(loss_fn)

MXNet is retired upstream; 1.9.1 runs on Python 3.11 with ``numpy==1.23.5`` (see docs/mxnet.md).
"""

from tensortap import exceptions, modes
from tensortap.core.collections import Collection, CollectionKeys
from tensortap.core.reduction_config import ReductionConfig
from tensortap.core.save_config import SaveConfig, SaveConfigMode
from tensortap.hook_config import HookConfig
from tensortap.mxnet.hook import RELU_ACTIVATIONS, Hook, get_hook
from tensortap.trials import Trial, create_trial
from tensortap.writer import WriterOptions

__all__ = [
    "RELU_ACTIVATIONS",
    "Collection",
    "CollectionKeys",
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
