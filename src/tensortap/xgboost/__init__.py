"""tensortap for XGBoost: ``import tensortap.xgboost as tt``.

::

    hook = tt.Hook(out_dir="runs/xgb", validation_data=dvalid)
    xgb.train(params, dtrain, 100, evals=[(dtrain, "train"), (dvalid, "validation")],
              callbacks=[hook])
"""

from tensortap import exceptions, modes
from tensortap.core.collections import Collection, CollectionKeys
from tensortap.core.reduction_config import ReductionConfig
from tensortap.core.save_config import SaveConfig, SaveConfigMode
from tensortap.hook_config import HookConfig
from tensortap.trials import Trial, create_trial
from tensortap.writer import WriterOptions
from tensortap.xgboost.hook import Hook, get_hook, tree_table

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
