"""tensortap for Keras 3 (and TensorFlow 2): ``import tensortap.keras as tt``.

::

    hook = tt.KerasHook(out_dir="runs/job1")
    model.fit(x, y, epochs=3, callbacks=[hook])
    model.evaluate(x_test, y_test, callbacks=[hook])
    trial = tt.create_trial(out_dir="runs/job1")
"""

from tensortap import exceptions, modes
from tensortap.core.collections import Collection, CollectionKeys
from tensortap.core.reduction_config import ReductionConfig
from tensortap.core.save_config import SaveConfig, SaveConfigMode
from tensortap.hook_config import HookConfig
from tensortap.keras.hook import OPTIMIZER_VARIABLES, KerasHook, get_hook
from tensortap.trials import Trial, create_trial
from tensortap.writer import WriterOptions

Hook = KerasHook  # the name the other frameworks' modules use

__all__ = [
    "OPTIMIZER_VARIABLES",
    "Collection",
    "CollectionKeys",
    "Hook",
    "HookConfig",
    "KerasHook",
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
