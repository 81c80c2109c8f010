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

if TYPE_CHECKING:  # `X as X`: re-exported for type checkers (no static __all__ here)
    from tensortap._shared import *  # noqa: F403
    from tensortap.xgboost._booster import tree_table as tree_table
    from tensortap.xgboost._hook import Hook as Hook
    from tensortap.xgboost._hook import get_hook as get_hook

__all__, __getattr__, __dir__ = face(__name__)
