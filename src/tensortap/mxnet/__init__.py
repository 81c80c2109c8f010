"""tensortap for MXNet Gluon (1.9): ``import tensortap.mxnet as tt``.

::

    hook = tt.Hook(out_dir="runs/job1", save_config=tt.SaveConfig(save_interval=10),
                   include_collections=["weights", "gradients", "losses", "relu_activations"])
    hook.register_block(net)
    hook.register_loss(loss_fn)

MXNet is retired upstream; 1.9.1 runs on Python 3.11 with ``numpy==1.23.5`` (see docs/mxnet.md).
Its names load at first use (the list is in :mod:`tensortap._faces`).
"""

from typing import TYPE_CHECKING

from tensortap._faces import face

if TYPE_CHECKING:  # `X as X`: re-exported for type checkers (no static __all__ here)
    from tensortap._shared import *  # noqa: F403
    from tensortap.mxnet._hook import RELU_ACTIVATIONS as RELU_ACTIVATIONS
    from tensortap.mxnet._hook import Hook as Hook
    from tensortap.mxnet._hook import get_hook as get_hook

__all__, __getattr__, __dir__ = face(__name__)
