"""A plain XGBoost script (no tensortap in it): breast cancer, a held-out validation set."""

import sys

import numpy as np
import xgboost as xgb
from sklearn.datasets import load_breast_cancer

x, y = load_breast_cancer(return_X_y=True)
if sys.argv[1:] == ["leak"]:  # a feature that is the label, give or take noise
    x = np.column_stack([x, y + np.random.default_rng(0).normal(0, 0.01, len(y))])
n = int(len(y) * 0.7)
dtrain, dvalid = xgb.DMatrix(x[:n], label=y[:n]), xgb.DMatrix(x[n:], label=y[n:])
booster = xgb.train(
    {"objective": "binary:logistic", "eval_metric": ["logloss", "error"]},
    dtrain,
    60,
    evals=[(dtrain, "train"), (dvalid, "validation")],
    verbose_eval=False,
)
print("trained", booster.num_boosted_rounds(), "rounds")
