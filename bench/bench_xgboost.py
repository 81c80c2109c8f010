"""XGBoost hook overhead: ``xgb.train`` with and without the hook, taking turns.

Configurations: no hook; the default without the vital signs (metrics every 10 rounds); the
default (the same, plus every round's ``vitals/loss`` and ``vitals/step_time``); zero code
change (the hook a job attaches: what its recommended rules for boosted trees read, every 10
rounds), without and with the vital signs; the same with the booster's collections
(importance, trees, the outcome) every 50th round instead (not a job's default: it shows what a
due round's fixed cost comes to when due less often); everything every 10 rounds (importance,
SHAP on the validation data, predictions, trees); everything every round; zero code change
with the job's save budget off (the job's default has it on: core._save_budget). The figure is the
median time per boosting round over ``--repeats`` trainings each, in wall time and in the
process's CPU time (every thread: the writer's work counts; steadier than wall time on a loaded
machine), both up to the hook's ``close()``. ``--rows`` and ``--depth`` make rounds faster (the
zero-code-change cost is per round: it shows most on small fast rounds).

    .venv/bin/python bench/bench_xgboost.py [--repeats 5] [--boost 200] [--rows 20000] [--depth 6]
        [--only 1,4]  (configuration numbers, in the order above; 0, no hook, always runs)
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

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


JOB = "job"
SPARSE = "sparse"  # a job's hook with the booster's own collections every 50th round
BUDGET = "save_budget"  # a job's hook with this save budget (default: the job's default)


def _job_hook(
    out: Path, vitals: bool = True, sparse: bool = False, budget: str | None = None
) -> tt.Hook:
    """The hook ``tensortap run`` attaches to an XGBoost script (its recommended rules'); with
    ``vitals`` false, without the vital signs (what a job saved before issue 43); ``sparse``:
    with ``feature_importance``, ``trees``, ``labels`` and ``predictions`` every 50th round
    (not a job's default: what the fixed cost of a due round comes to when due less often);
    ``budget``: the job's save budget (``"off"``; None: the default, core._save_budget)."""
    from tensortap.jobs._specs import DebuggerHookConfig, Rule, hook_config
    from tensortap.rules import rule_configs

    specs = [Rule.builtin(config) for config in rule_configs.recommended("xgboost")]
    given = None if budget is None else DebuggerHookConfig(hook_parameters={"save_budget": budget})
    config = hook_config(str(out), given, specs, None)
    if vitals:
        hook = config.create_hook(tt.Hook)
    else:
        included = [n for n in config.hook_kwargs()["include_collections"] if n != "vitals"]
        hook = config.create_hook(tt.Hook, include_collections=included)
    if sparse:
        for name in ("feature_importance", "trees", "labels", "predictions"):
            hook.get_collection(name).save_config = tt.SaveConfig(save_interval=50)
    return hook


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--boost", type=int, default=200)
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument(
        "--only", default="", help="comma-separated configuration numbers to run (0: no hook)"
    )
    args = parser.parse_args()
    x, y = make_classification(args.rows, 30, n_informative=10, random_state=0)
    cut = args.rows * 4 // 5
    dtrain = xgb.DMatrix(x[:cut], label=y[:cut])
    dvalid = xgb.DMatrix(x[cut:], label=y[cut:])
    params = {
        "objective": "binary:logistic",
        "max_depth": args.depth,
        "nthread": 1,
        "eval_metric": "logloss",
    }
    every10, every1 = tt.SaveConfig(save_interval=10), tt.SaveConfig(save_interval=1)
    configs: dict[str, dict[str, Any] | None] = {
        "no hook": None,
        "default without vital signs": {"include_collections": ["metrics", "hyperparameters"]},
        "default (metrics every 10, vitals every round)": {},
        "zero code change without vital signs": {JOB: False},
        "zero code change (a job's hook)": {JOB: True},
        "the same, the booster's collections every 50": {JOB: True, SPARSE: True},
        "everything every 10 rounds": {"save_config": every10, "include_collections": ALL},
        "everything every round": {"save_config": every1, "include_collections": ALL},
        "zero code change, save budget off": {JOB: True, BUDGET: "off"},
    }
    if args.only:
        keep = {int(n) for n in args.only.split(",")} | {0}
        configs = {k: v for n, (k, v) in enumerate(configs.items()) if n in keep}
    evals = [(dtrain, "train"), (dvalid, "validation")]
    times: dict[str, list[float]] = {k: [] for k in configs}
    cpus: dict[str, list[float]] = {k: [] for k in configs}
    xgb.train(params, dtrain, 5, evals=evals, verbose_eval=False)  # warm up, not timed
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for number, (label, kwargs) in enumerate(configs.items()):
                callbacks = []
                if kwargs is not None:
                    out = Path(tmp) / f"{r}-{number}"
                    hook = (
                        _job_hook(out, kwargs[JOB], kwargs.get(SPARSE, False), kwargs.get(BUDGET))
                        if JOB in kwargs
                        else tt.Hook(out, **kwargs)
                    )
                    hook.validation_data = dvalid  # what the attachment gives it
                    hook.name_eval_sets(dtrain, evals)
                    callbacks = [hook]
                start, cpu = time.perf_counter(), time.process_time()
                xgb.train(
                    params,
                    dtrain,
                    args.boost,
                    evals=evals,
                    verbose_eval=False,
                    callbacks=callbacks,
                )
                for hook in callbacks:
                    hook.close()  # the writer's work is the hook's: CPU counted to here
                times[label].append((time.perf_counter() - start) / args.boost)
                cpus[label].append((time.process_time() - cpu) / args.boost)
    base, base_cpu = statistics.median(times["no hook"]), statistics.median(cpus["no hook"])
    print(f"{args.boost} rounds, {cut:,} x 30 training rows, max_depth {args.depth}, 1 thread:")
    print(f"  (load average {os.getloadavg()[0]:.1f} at the end; medians of {args.repeats})")
    for label, values in times.items():
        median = statistics.median(values)
        cpu = statistics.median(cpus[label])
        print(
            f"  {label:40s} {1000 * median:7.2f} ms/round {median / base:6.3f}x   "
            f"CPU {1000 * cpu:7.2f} ms/round {cpu / base_cpu:6.3f}x"
        )


if __name__ == "__main__":
    main()
