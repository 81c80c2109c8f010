"""tensortap for XGBoost: ``import tensortap.xgboost as tt``.

::

    hook = tt.Hook(out_dir="runs/xgb", validation_data=dvalid)
    xgb.train(params, dtrain, 100, evals=[(dtrain, "train"), (dvalid, "validation")],
              callbacks=[hook])
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
    from tensortap.xgboost.hook import Hook, get_hook, tree_table

# The hook imports XGBoost (about a second): it loads at first use, so that zero-code-change
# support (tensortap.xgboost.zcc, imported by every attached script) costs nothing to scripts
# that never use XGBoost.
_FROM_HOOK = {"Hook", "get_hook", "tree_table"}


def __getattr__(name: str) -> Any:
    if name in _FROM_HOOK:
        from tensortap.xgboost import hook

        value = getattr(hook, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tensortap.xgboost' has no attribute {name!r}")


__all__ = [
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
    "tree_table",
]
