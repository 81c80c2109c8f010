"""Where an XGBoost job's hook spends its CPU: the hook with its collections added one at a
time, on small fast rounds, taking turns with no hook. Per configuration, the median over
``--repeats`` trainings of the CPU time per round of the training thread and of the writer's
thread (read before the hook's ``close()``), and of the whole process (both, up to ``close()``).

    .venv/bin/python bench/bench_xgboost_parts.py [--repeats 5] [--boost 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import xgboost as xgb
from sklearn.datasets import make_classification

import tensortap.xgboost as tt

BASE = ["metrics", "hyperparameters", "losses", "vitals"]
CONFIGS: dict[str, list[str] | None] = {
    "no hook": None,
    "metrics, hyperparameters, vitals": BASE,
    "+ feature_importance": [*BASE, "feature_importance"],
    "+ trees": [*BASE, "trees"],
    "+ labels, predictions": [*BASE, "labels", "predictions"],
    "all of them (a job's)": [*BASE, "feature_importance", "trees", "labels", "predictions"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--boost", type=int, default=300)
    args = parser.parse_args()
    x, y = make_classification(3000, 30, n_informative=10, random_state=0)
    dtrain = xgb.DMatrix(x[:2400], label=y[:2400])
    dvalid = xgb.DMatrix(x[2400:], label=y[2400:])
    params = {"objective": "binary:logistic", "max_depth": 3, "nthread": 1}
    evals = [(dtrain, "train"), (dvalid, "validation")]
    found: dict[str, list[tuple[float, float, float]]] = {k: [] for k in CONFIGS}
    xgb.train(params, dtrain, 5, evals=evals, verbose_eval=False)  # warm up
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for label, included in CONFIGS.items():
                hooks = []
                if included is not None:
                    out = Path(tmp) / f"{r}-{len(found[label])}-{label[:3]}"
                    hook = tt.Hook(out, include_collections=included)
                    hook.validation_data = dvalid
                    hook.name_eval_sets(dtrain, evals)
                    hooks = [hook]
                cpu, main = time.process_time(), time.thread_time()
                xgb.train(
                    params, dtrain, args.boost, evals=evals, verbose_eval=False, callbacks=hooks
                )
                main = time.thread_time() - main
                writer = 0.0
                for hook in hooks:
                    ident = hook._writer._thread.ident
                    if ident is not None:
                        writer = time.clock_gettime(time.pthread_getcpuclockid(ident))
                    hook.close()
                cpu = time.process_time() - cpu
                found[label].append((main / args.boost, writer / args.boost, cpu / args.boost))
    base = statistics.median(c for _, _, c in found["no hook"])
    print(f"{args.boost} rounds of 0.7 ms (2,400 x 30, depth 3), load {os.getloadavg()[0]:.1f}")
    print("  configuration                      training  writer   process (over no hook)")
    for label, values in found.items():
        main, writer, cpu = (statistics.median(v[i] for v in values) for i in range(3))
        print(
            f"  {label:34s} {1e6 * main:6.0f} us {1e6 * writer:5.0f} us {1e6 * cpu:6.0f} us "
            f"(+{1e6 * (cpu - base):4.0f} us, {cpu / base:.3f}x)"
        )


if __name__ == "__main__":
    main()
