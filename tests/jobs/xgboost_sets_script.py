"""A plain XGBoost script (no tensortap in it) whose training data is one of its eval sets:
``--api sklearn`` fits an XGBClassifier with ``eval_set=[(X, y), (X_valid, y_valid)]`` (XGBoost
names the sets validation_0 and validation_1); ``--api train`` calls ``xgb.train`` with the
sets named ``dtrain`` and ``dvalid``. ``--metrics`` is the eval_metric list. The booster's own
per-round metrics are written to evals.json."""

import argparse
import json

import xgboost as xgb
from sklearn.datasets import load_breast_cancer

parser = argparse.ArgumentParser()
parser.add_argument("--api", default="sklearn")
parser.add_argument("--metrics", default="error,logloss")
parser.add_argument("--rounds", type=int, default=40)
args = parser.parse_args()
metrics = args.metrics.split(",")
x, y = load_breast_cancer(return_X_y=True)
n = int(len(y) * 0.7)
x_train, y_train, x_valid, y_valid = x[:n], y[:n], x[n:], y[n:]
if args.api == "sklearn":
    model = xgb.XGBClassifier(n_estimators=args.rounds, max_depth=3, eval_metric=metrics)
    model.fit(x_train, y_train, eval_set=[(x_train, y_train), (x_valid, y_valid)], verbose=False)
    result = model.evals_result()
else:
    dtrain, dvalid = xgb.DMatrix(x_train, label=y_train), xgb.DMatrix(x_valid, label=y_valid)
    result = {}
    xgb.train(
        {"objective": "binary:logistic", "max_depth": 3, "eval_metric": metrics},
        dtrain,
        args.rounds,
        evals=[(dtrain, "dtrain"), (dvalid, "dvalid")],
        evals_result=result,
        verbose_eval=False,
    )
with open("evals.json", "w") as f:
    json.dump(result, f)
print("trained", args.rounds, "rounds")
