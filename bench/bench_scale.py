"""Many runs and many workers (issue 23).

``--part rules``: N synthetic trials x S steps (a loss and the reductions of 4 gradients per
step), judged by two built-in rules with ``run_rules`` on 1 and 2 local processes and on a 2-CPU
local Ray cluster; the overhead per task from N trials of one step.

``--part table``: the same trials exported as Parquet, and queries over the dataset.

``--part workers``: trials of W workers (10 .. 1,000) x S steps x T tensors, as a run of W ranks
writes them: the time and the store requests to list the workers, open the trial (read every
index) and read values, as W grows.

    .venv/bin/python bench/bench_scale.py --part rules --trials 1000 --steps 1000
    .venv/bin/python bench/bench_scale.py --part table --trials 1000 --steps 1000
    .venv/bin/python bench/bench_scale.py --part workers --workers 10 100 1000 --steps 100
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import tensortap as tt
from tensortap.testing._counting import counting_store
from tensortap.trials._trial import Trial

RULES = ["ExplodingTensor", "LossNotDecreasing"]


def make_trial(out: Path, steps: int, tensors: int = 4, worker: int = 0, workers: int = 1) -> None:
    hook = tt.Hook(
        out,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["losses", "gradients"],
        worker=worker,
        num_workers=workers,
    )
    hook.get_collection("gradients").reduction_config = tt.ReductionConfig(
        reductions=["min", "max", "mean"], norms=["l2"]
    )
    grads = [np.full(8, 0.1 * (i + 1), np.float32) for i in range(tensors)]
    hook.set_mode(tt.modes.TRAIN)
    for step in range(steps):
        hook.save_scalar("loss", 2.0 / (1 + 0.01 * step), "losses")
        for i, g in enumerate(grads):
            hook.save_tensor(f"gradient/layer{i}.weight", g, "gradients")
        hook.next_step()
    hook.close()


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def make_trials(root: Path, n: int, steps: int) -> list[str]:
    paths = [str(root / f"run{i:05d}") for i in range(n)]
    for p in paths:
        make_trial(Path(p), steps)
    return paths


def part_rules(root: Path, n: int, steps: int) -> None:
    from tensortap.scale import run_rules

    seconds, trials = timed(lambda: make_trials(root / "trials", n, steps))
    print(f"wrote {n} trials x {steps} steps in {seconds:.1f} s")
    print("| engine | workers | seconds | trials/s | steps/s |")
    print("|---|---|---|---|---|")
    configs: list[tuple[str, int]] = [("local", 1), ("local", 2)]
    try:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        configs.append(("ray", 2))
    except ImportError:
        ray = None
    for engine, workers in configs:
        t0 = time.perf_counter()
        res = run_rules(trials, RULES, engine, workers=workers)
        secs = time.perf_counter() - t0
        statuses = Counter(res.summary.column("status").to_pylist())
        print(
            f"| {engine} | {workers} | {secs:.1f} | {n / secs:.1f} | {n * steps / secs:,.0f} |"
            f"  <!-- {dict(statuses)} -->"
        )
    one = make_trials(root / "one-step", n, 1)
    for engine, workers in configs:
        t0 = time.perf_counter()
        run_rules(one, RULES, engine, workers=workers)
        secs = time.perf_counter() - t0
        print(f"overhead per task ({engine}, {workers} workers): {secs / n * 1e3:.1f} ms")
    if ray is not None:
        ray.shutdown()


def part_table(root: Path, n: int, steps: int) -> None:
    from tensortap.table import export_parquet, query

    seconds, trials = timed(lambda: make_trials(root / "trials", n, steps))
    print(f"wrote {n} trials x {steps} steps in {seconds:.1f} s")
    data = root / "stats"
    secs, done = timed(lambda: export_parquet(trials, data))
    rows = sum(d.rows for d in done)
    size = sum(f.stat().st_size for f in data.rglob("*.parquet"))
    print(f"export: {rows:,} rows in {secs:.1f} s = {rows / secs:,.0f} rows/s, {size / 1e6:.1f} MB")
    secs, done = timed(lambda: export_parquet(trials, data))
    print(f"export again (nothing new): {secs:.2f} s")
    queries = {
        "loss at one step, every run": "SELECT run, value FROM stats WHERE tensor = 'loss' "
        f"AND step = {steps // 2}",
        "max gradient l2 of the last 1,000 steps per run": "SELECT run, max(value) FROM stats "
        f"WHERE statistic = 'l2' AND step >= {steps - 1000} GROUP BY run",
        "rows per run and statistic (full scan)": "SELECT run, statistic, count(*), avg(value) "
        "FROM stats GROUP BY run, statistic",
    }
    for what, sql in queries.items():
        secs, table = timed(lambda sql=sql: query(sql, data))
        print(
            f"query '{what}': {secs:.2f} s ({rows / secs:,.0f} dataset rows/s), "
            f"{table.num_rows} result rows"
        )


def part_workers(root: Path, worker_counts: list[int], steps: int, tensors: int) -> None:
    print(
        "| workers | write s | list workers s | open s | requests to open | read 1 tensor, "
        "all steps, all workers s | read 1 step, all workers s |"
    )
    print("|---|---|---|---|---|---|---|")
    for count in worker_counts:
        out = root / f"w{count}"
        t0 = time.perf_counter()
        for w in range(count):
            make_trial(out, steps, tensors, w, count)
        t_write = time.perf_counter() - t0
        store, counts = counting_store(out)
        t0 = time.perf_counter()
        store.list_dir("workers/")
        t_list = time.perf_counter() - t0
        counts.clear()
        t0 = time.perf_counter()
        trial = Trial(store)
        t_open = time.perf_counter() - t0
        opened = sum(counts.values())
        tensor = trial.tensor("gradient/layer0.weight")
        t0 = time.perf_counter()
        reads = 0
        for step in trial.steps():
            for worker in tensor.workers(step):
                tensor.reduction_value(step, "l2", worker=worker)
                reads += 1
        t_read = time.perf_counter() - t0
        t0 = time.perf_counter()
        for worker in trial.workers():
            tensor.reduction_value(steps // 2, "l2", worker=worker)
        t_step = time.perf_counter() - t0
        assert reads == count * steps
        print(
            f"| {count} | {t_write:.1f} | {t_list:.4f} | {t_open:.2f} | {opened} | "
            f"{t_read:.2f} | {t_step:.4f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--part", choices=["rules", "table", "workers"], required=True)
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--workers", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--tensors", type=int, default=10)
    args = parser.parse_args()
    print(f"# {platform.machine()}, cpus={os.cpu_count()}, python {platform.python_version()}")
    root = Path(tempfile.mkdtemp(prefix="tensortap-scale-", dir=os.environ.get("BENCH_DIR")))
    try:
        if args.part == "rules":
            part_rules(root, args.trials, args.steps)
        elif args.part == "table":
            part_table(root, args.trials, args.steps)
        else:
            part_workers(root, args.workers, args.steps, args.tensors)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
