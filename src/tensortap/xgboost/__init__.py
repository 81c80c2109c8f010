"""tensortap for XGBoost: ``import tensortap.xgboost as tt``.

::

    hook = tt.Hook(out_dir="runs/xgb", validation_data=dvalid)
    xgb.train(params, dtrain, 100, evals=[(dtrain, "train"), (dvalid, "validation")],
              callbacks=[hook])

Its names load at first use (the list is in :mod:`tensortap._faces`): the hook imports XGBoost
(about a second), which a script that never uses it does not pay for.
"""

from typing import TYPE_CHECKING

from tensortap._faces import face

if TYPE_CHECKING:
    from tensortap._shared import *  # noqa: F403
    from tensortap.xgboost.hook import Hook, get_hook, tree_table  # noqa: F401

__all__, __getattr__, __dir__ = face(__name__)
