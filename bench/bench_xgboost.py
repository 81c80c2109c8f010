"""XGBoost hook overhead: ``xgb.train`` with and without the hook, taking turns.

Configurations: no hook; the default (metrics every 10 rounds); everything every 10 rounds
(importance, SHAP on the validation data, predictions, trees); everything every round. The
figure is the median time per boosting round over ``--rounds`` trainings each.

    .venv/bin/python bench/bench_xgboost.py [--repeats 5] [--boost 200]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import xgboost as xgb
from sklearn.datasets import make_classification

import tensortap.xgboost as tt

ALL = [
    "metrics",
    "hyperparameters",
    "feature_importance",
    "average_shap",
    "full_shap",
    "predictions",
    "labels",
    "trees",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--boost", type=int, default=200)
    args = parser.parse_args()
    x, y = make_classification(20000, 30, n_informative=10, random_state=0)
    dtrain = xgb.DMatrix(x[:16000], label=y[:16000])
    dvalid = xgb.DMatrix(x[16000:], label=y[16000:])
    params = {
        "objective": "binary:logistic",
        "max_depth": 6,
        "nthread": 1,
        "eval_metric": "logloss",
    }
    every10, every1 = tt.SaveConfig(save_interval=10), tt.SaveConfig(save_interval=1)
    configs = {
        "no hook": None,
        "default (metrics every 10 rounds)": {},
        "everything every 10 rounds": {"save_config": every10, "include_collections": ALL},
        "everything every round": {"save_config": every1, "include_collections": ALL},
    }
    times: dict[str, list[float]] = {k: [] for k in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for label, kwargs in configs.items():
                callbacks = []
                if kwargs is not None:
                    out = Path(tmp) / f"{len(times[label])}-{r}-{label[:8]}"
                    callbacks = [tt.Hook(out, validation_data=dvalid, **kwargs)]
                start = time.perf_counter()
                xgb.train(
                    params,
                    dtrain,
                    args.boost,
                    evals=[(dtrain, "train"), (dvalid, "validation")],
                    verbose_eval=False,
                    callbacks=callbacks,
                )
                times[label].append((time.perf_counter() - start) / args.boost)
                for hook in callbacks:
                    hook.close()
    base = statistics.median(times["no hook"])
    print(f"{args.boost} rounds, 16,000 x 30 training rows, max_depth 6, 1 thread:")
    for label, values in times.items():
        median = statistics.median(values)
        print(f"  {label:36s} {1000 * median:7.2f} ms/round  {median / base:5.3f}x")


if __name__ == "__main__":
    main()
