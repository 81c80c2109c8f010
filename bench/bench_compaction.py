"""Open and read cost of a paced run before and after compaction (issue 48, item 2).

A run is written through the public hook (``Hook.save_scalar``, ``--series`` scalars a step)
at a training pace (a step every ``--pace-ms``), so the writer publishes a segment every
``flush_secs``; once with compaction off (every small segment kept, rollups of their series),
once as the writer now writes it (merging its small segments), and the first copy is then
compacted by ``compact_trial``. Each copy is then opened (``create_trial(path).steps()``: every
index read) and read (``trial.series()``: every series) in fresh processes, interleaved, CPU
time (user + system, imports left out) and peak resident memory, medians of ``--repeat``.

    PYTHONPATH=$PWD/src .venv/bin/python bench/bench_compaction.py --steps 3000 --pace-ms 20
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_MEASURE = r"""
import json, resource, sys, time
import tensortap as tt
path, what = sys.argv[1], sys.argv[2]
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
start = cpu()
trial = tt.create_trial(path)
if what == "open":
    count = len(trial.steps())
else:
    count = len(trial.series()["value"])
spent = cpu() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"cpu_s": spent, "count": count, "peak_bytes": peak}))
"""


def write_run(path: Path, steps: int, series: int, pace_s: float, compact: bool) -> float:
    """The run, written through the public hook at a pace; the hook's write CPU (seconds)."""
    import tensortap as tt

    names = [f"series/{i:03d}" for i in range(series)]
    hook = tt.Hook(
        path,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["scalars"],
        writer_options=tt.WriterOptions(compact=compact),
    )
    began = time.process_time()
    due = time.monotonic()
    for step in range(steps):
        for i, name in enumerate(names):
            hook.save_scalar(name, float(step * 1000 + i))
        hook.next_step()
        due += pace_s
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    hook.close()
    return time.process_time() - began


def objects(path: Path) -> int:
    return sum(1 for p in path.rglob("*") if p.is_file())


def measure(path: Path, what: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path), what],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--series", type=int, default=100)
    parser.add_argument("--pace-ms", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    from tensortap.writer import compact_trial

    root = Path(tempfile.mkdtemp(prefix="bench_compaction_"))
    try:
        kept, merged, by_writer = root / "kept", root / "compacted", root / "writer"
        write_cpu = {
            "kept": write_run(kept, args.steps, args.series, args.pace_ms / 1000, False),
            "writer": write_run(by_writer, args.steps, args.series, args.pace_ms / 1000, True),
        }
        shutil.copytree(kept, merged)
        began = time.process_time()
        merges = compact_trial(merged)
        compact_cpu = time.process_time() - began
        runs = {"kept": kept, "compacted": merged, "writer": by_writer}
        figures: dict[str, dict[str, list[dict[str, float]]]] = {
            name: {"open": [], "read": []} for name in runs
        }
        for _ in range(args.repeat):  # interleaved: each round measures every copy
            for what in ("open", "read"):
                for name, path in runs.items():
                    figures[name][what].append(measure(path, what))
        result = {
            "steps": args.steps,
            "series": args.series,
            "pace_ms": args.pace_ms,
            "write_cpu_s": write_cpu,
            "compact_trial_cpu_s": compact_cpu,
            "merges": len(merges),
            "objects": {name: objects(path) for name, path in runs.items()},
            "indexes": {
                name: len(list((path / "workers/worker_0/index").iterdir()))
                for name, path in runs.items()
            },
        }
        for name in runs:
            for what in ("open", "read"):
                rows = figures[name][what]
                result[f"{name}_{what}_cpu_s"] = statistics.median(r["cpu_s"] for r in rows)
                result[f"{name}_{what}_peak_mb"] = (
                    statistics.median(r["peak_bytes"] for r in rows) / 1e6
                )
                counts = {r["count"] for r in rows}
                if len(counts) != 1:
                    raise SystemExit(f"{name} {what}: counts differ between tries: {counts}")
        print(json.dumps(result, indent=1))
        if args.json is not None:
            args.json.write_text(json.dumps(result, indent=1))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
