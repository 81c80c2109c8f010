"""tensortap for Keras 3 (and TensorFlow 2): ``import tensortap.keras as tt``.

::

    hook = tt.KerasHook(out_dir="runs/job1")
    model.fit(x, y, epochs=3, callbacks=[hook])
    model.evaluate(x_test, y_test, callbacks=[hook])
    trial = tt.create_trial(out_dir="runs/job1")
"""

from typing import TYPE_CHECKING, Any

from tensortap import exceptions, modes
from tensortap.core.collections import Collection, CollectionKeys
from tensortap.core.reduction_config import ReductionConfig
from tensortap.core.save_config import SaveConfig, SaveConfigMode
from tensortap.hook_config import HookConfig
from tensortap.trials import Trial, create_trial
from tensortap.writer import WriterOptions

if TYPE_CHECKING:
    from tensortap.keras.hook import OPTIMIZER_VARIABLES, KerasHook, get_hook

    Hook = KerasHook

# The hook imports Keras (seconds): it loads at first use, so that zero-code-change support
# (tensortap.keras.zcc, imported by every attached script) costs nothing to scripts that never
# use Keras.
_FROM_HOOK = {"OPTIMIZER_VARIABLES", "KerasHook", "get_hook", "Hook"}


def __getattr__(name: str) -> Any:
    if name in _FROM_HOOK:
        from tensortap.keras import hook

        value = hook.KerasHook if name == "Hook" else getattr(hook, name)
        globals()[name] = value  # Hook: the name the other frameworks' modules use
        return value
    raise AttributeError(f"module 'tensortap.keras' has no attribute {name!r}")


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
