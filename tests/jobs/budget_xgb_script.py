"""A plain XGBoost script (no tensortap in it) of 200 small rounds: breast cancer, a held-out
validation set. For the save budget's job tests (tests/jobs/test_save_budget_jobs.py)."""

import xgboost as xgb
from sklearn.datasets import load_breast_cancer

x, y = load_breast_cancer(return_X_y=True)
n = int(len(y) * 0.7)
dtrain, dvalid = xgb.DMatrix(x[:n], label=y[:n]), xgb.DMatrix(x[n:], label=y[n:])
booster = xgb.train(
    {"objective": "binary:logistic", "eval_metric": "logloss", "max_depth": 2, "nthread": 1},
    dtrain,
    200,
    evals=[(dtrain, "train"), (dvalid, "validation")],
    verbose_eval=False,
)
print("trained", booster.num_boosted_rounds(), "rounds")
