"""A plain XGBoost script (no tensortap in it) that boosts 100 rounds at eta 0.1: a healthy
booster that has not learned yet at round 10 (its early validation predictions miss a class
more than Confusion allows) and ends with a validation error of a few percent.
``--api train``: ``xgb.train`` with evals; ``--api sklearn``: ``XGBClassifier.fit(eval_set=...)``.
``--data cancer|digits``; ``--shuffle``: the labels shuffled (nothing to learn)."""

import argparse

import numpy as np
import xgboost as xgb
from sklearn.datasets import load_breast_cancer, load_digits

parser = argparse.ArgumentParser()
parser.add_argument("--api", choices=["train", "sklearn"], default="train")
parser.add_argument("--data", choices=["cancer", "digits"], default="cancer")
parser.add_argument("--shuffle", action="store_true")
args = parser.parse_args()
x, y = (load_breast_cancer if args.data == "cancer" else load_digits)(return_X_y=True)
order = np.random.default_rng(0).permutation(len(y))
x, y = x[order], y[order]
if args.shuffle:
    y = np.random.default_rng(1).permutation(y)
n = int(len(y) * 0.7)
binary = len(np.unique(y)) == 2
if args.api == "sklearn":
    model = xgb.XGBClassifier(n_estimators=100, max_depth=3, learning_rate=0.1, n_jobs=1)
    model.fit(x[:n], y[:n], eval_set=[(x[:n], y[:n]), (x[n:], y[n:])], verbose=False)
    error = float(np.mean(model.predict(x[n:]) != y[n:]))
else:
    params: dict[str, object] = {"max_depth": 3, "eta": 0.1, "nthread": 1}
    if binary:
        params.update(objective="binary:logistic", eval_metric=["logloss", "error"])
    else:
        params.update(objective="multi:softprob", num_class=10, eval_metric=["mlogloss", "merror"])
    dtrain, dvalid = xgb.DMatrix(x[:n], label=y[:n]), xgb.DMatrix(x[n:], label=y[n:])
    found: dict = {}
    xgb.train(params, dtrain, 100, evals=[(dtrain, "train"), (dvalid, "validation")],
              evals_result=found, verbose_eval=False)  # fmt: skip
    error = found["validation"]["error" if binary else "merror"][-1]
print("validation error", error)
