"""The report of a long job (issue 48, item 5): ``tensortap report`` of a job that trained a
digits MLP for ``--steps`` steps under ``tensortap run`` (its default collections and its rules
beside training), its CPU time, peak memory and page size.

    PYTHONPATH=$PWD/src .venv/bin/python bench/bench_job_report.py --steps 100000

The job is written once under ``--dir`` (kept; ``--reuse`` measures it again); the report is
made ``--repeat`` times, each in a fresh process (``tensortap report JOB -o page.html``), its
CPU (user + system) and peak resident size from ``getrusage`` of the finished child.
Target of the issue: < 15 s of CPU, < 3 MB of page, < 500 MB peak for a 10^5-step job.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = """
import argparse
import torch
from sklearn.datasets import load_digits
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, required=True)
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)
x, y = load_digits(return_X_y=True)
x = torch.tensor(x / 16.0, dtype=torch.float32)
y = torch.tensor(y)
model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
loss_fn = nn.CrossEntropyLoss()
batch = 32
for step in range(args.steps):
    i = (step * batch) % (len(y) - batch)
    optimizer.zero_grad()
    loss = loss_fn(model(x[i : i + batch]), y[i : i + batch])
    loss.backward()
    optimizer.step()
"""


MEASURE = """
import resource, subprocess, sys, json
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
use = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": done.returncode, "cpu": use.ru_utime + use.ru_stime,
                  "peak_mb": use.ru_maxrss / 1024, "err": done.stderr[-2000:]}))
"""


def measure(cmd: list[str], cwd: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, *cmd], cwd=cwd, capture_output=True, text=True, check=True
    )
    got = json.loads(out.stdout)
    if got["rc"] != 0:
        raise SystemExit(f"{cmd} failed: {got['err']}")
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, default=Path("bench/out/job_report"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--reuse", action="store_true")
    args = parser.parse_args()
    work = args.dir.resolve() / f"steps-{args.steps}"
    runs = work / "runs"
    if not (args.reuse and runs.is_dir()):
        work.mkdir(parents=True, exist_ok=True)
        (work / "train.py").write_text(SCRIPT)
        began = time.monotonic()
        cmd = ["-m", "tensortap.cli", "run", "--output", str(runs), "--name", "long", "--"]
        cmd += [sys.executable, str(work / "train.py"), "--steps", str(args.steps)]
        trained = measure([sys.executable, *cmd], work)
        print(
            f"job of {args.steps} steps: {time.monotonic() - began:.0f} s wall, "
            f"{trained['cpu']:.0f} s CPU"
        )
    (job,) = [p for p in runs.iterdir() if (p / "job.json").exists()]
    size = sum(f.stat().st_size for f in (job / "trial").rglob("*") if f.is_file())
    print(f"job {job.name}: trial {size / 1e6:.1f} MB")
    rows = []
    for k in range(args.repeat):
        page = work / f"page-{k}.html"
        got = measure(
            [sys.executable, "-m", "tensortap.cli", "report", str(job), "-o", str(page)], work
        )
        rows.append((got["cpu"], got["peak_mb"], page.stat().st_size / 1e6))
        print(
            f"report {k}: {got['cpu']:.2f} s CPU, {got['peak_mb']:.0f} MB peak, "
            f"{rows[-1][2]:.2f} MB page"
        )
    cpu, peak, page_mb = (statistics.median(r[i] for r in rows) for i in range(3))
    print(
        f"\nmedian of {len(rows)}: {cpu:.2f} s CPU (target < 15), {peak:.0f} MB peak "
        f"(< 500), {page_mb:.2f} MB page (< 3); resource: {resource.getpagesize()} B pages"
    )


if __name__ == "__main__":
    main()
