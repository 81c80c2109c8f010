"""Reading every series of a run written through the public hook (issue 48): CPU time and peak
memory of ``SeriesReader(path).series()`` and ``create_trial(path).series()``, each in a fresh
process (imports not counted), per run length; and the CPU of ``tensortap report`` on it.

Runs are written by ``tensortap.Hook.save_scalar`` (``--series`` scalars a step, the way a
user's loop saves them), flat out or at ``--pace-ms`` a step (the writer then cuts a segment
every ``flush_secs``, as in real training), and kept under ``--out`` keyed by their size.

    PYTHONPATH=$PWD/src .venv/bin/python bench/bench_series_reads.py --steps 10000,30000,100000
    PYTHONPATH=$PWD/src .venv/bin/python bench/bench_series_reads.py --steps 2000 --pace-ms 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "out" / "series_reads"

CHILD = r"""
import json, resource, sys, time
tool, path = sys.argv[1], sys.argv[2]
import numpy as np
import tensortap as tt
from tensortap.trials._series import SeriesReader
if tool == "report":
    from tensortap.report import write_report
cpu0 = time.process_time()
if tool == "series_reader":
    columns = SeriesReader(path).series()
    rows = len(columns["value"]) + 0 * len(columns["global_step"])
elif tool == "trial_series":
    columns = tt.create_trial(path).series()
    rows = len(columns["value"]) + 0 * len(columns["global_step"])
else:
    page = write_report(path, sys.argv[3])
    rows = page.stat().st_size
cpu = time.process_time() - cpu0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
try:  # ru_maxrss keeps the high-water mark of the process forked before the exec: a parent
    # that has just written a run would be counted; the kernel's VmHWM starts at the exec
    with open("/proc/self/status") as status:
        peak = next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmHWM:"))
except (OSError, StopIteration):
    pass
print(json.dumps({"cpu_s": cpu, "rows": rows, "peak_bytes": peak}))
"""


def write_run(out: Path, steps: int, series: int, pace_ms: float) -> float:
    """A run of ``series`` scalars a step through ``Hook.save_scalar``; its write CPU."""
    import numpy as np

    import tensortap as tt

    hook = tt.Hook(out, save_config=tt.SaveConfig(save_interval=1), include_collections=["scalars"])
    hook.set_mode(tt.modes.TRAIN)
    names = [f"series/{i:04d}" for i in range(series)]
    rng = np.random.default_rng(0)
    cpu0 = time.process_time()
    next_at = time.monotonic()
    for first in range(0, steps, 1000):
        for row in rng.normal(size=(min(1000, steps - first), series)).tolist():
            for name, value in zip(names, row, strict=True):
                hook.save_scalar(name, value)
            hook.next_step()
            if pace_ms:
                next_at += pace_ms / 1000
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)  # the training step's own time
    if not hook.close().healthy:
        raise SystemExit(f"bench_series_reads: writing {out} went wrong")
    return time.process_time() - cpu0


def measure(tool: str, path: Path, page: Path) -> dict[str, float]:
    env = dict(os.environ)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, tool, str(path), str(page)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="10000,30000,100000")
    parser.add_argument("--series", type=int, default=100)
    parser.add_argument("--pace-ms", type=float, default=0.0)
    parser.add_argument("--repeat", type=int, default=2, help="tries per measure (best kept)")
    parser.add_argument("--report", action="store_true", help="measure tensortap report too")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    tools = ["series_reader", "trial_series"] + (["report"] if args.report else [])
    print("| steps x series | values | objects | " + " | ".join(tools) + " |")
    print("|---" * (3 + len(tools)) + "|")
    for steps in [int(s) for s in args.steps.split(",")]:
        run = args.out / f"hook-{steps}x{args.series}-pace{args.pace_ms:g}"
        if not (run / "workers").exists():
            print(f"writing {run.name} ...", file=sys.stderr)
            cpu = write_run(run, steps, args.series, args.pace_ms)
            print(f"  write CPU {cpu:.1f} s", file=sys.stderr)
        worker = run / "workers" / "worker_0"
        objects = sum(
            len(os.listdir(worker / d)) for d in ("series", "rollups") if (worker / d).exists()
        )
        cells = []
        for tool in tools:
            tries = [measure(tool, run, args.out / f"{run.name}.html") for _ in range(args.repeat)]
            best = min(tries, key=lambda t: t["cpu_s"])
            unit = "KB page" if tool == "report" else "us a value"
            per = best["rows"] / 1e3 if tool == "report" else best["cpu_s"] / best["rows"] * 1e6
            cells.append(
                f"{best['cpu_s']:.2f} s, {best['peak_bytes'] / 2**20:.0f} MB ({per:.3g} {unit})"
            )
        print(
            f"| {steps:,} x {args.series} | {steps * args.series:,} | {objects} | "
            + " | ".join(cells)
            + " |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
