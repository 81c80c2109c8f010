"""Opening a TensorBoard logdir (issue 47 item 4): ``--runs`` runs of ``--points`` scalars each
(a loss every step, an evaluation loss and accuracy every 100), written by the ``tensorboard``
package's own writer. Measured in CPU time of this process (``time.process_time``), in
interleaved rounds, medians:

- *read, tensortap*: ``tensortap.trackers.read_runs(logdir)`` (tensortap's TFRecord framing,
  TensorBoard's protocol buffers);
- *read, TensorBoard*: TensorBoard's own ``EventAccumulator`` over each run, every point kept
  (``size_guidance`` 0), its scalars listed: what a user reads the files with otherwise
  (TensorFlow already imported by the writer, so its import is not counted);
- *import*: ``tensortap.trackers.import_runs(logdir, out)``: read, judged by the rules of
  scalars (a trial in memory), written as trials.

    PYTHONPATH=src .venv/bin/python bench/bench_import.py [--runs 10] [--points 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from tensortap.trackers import import_runs, read_runs


def write_logdir(root: Path, runs: int, points: int) -> None:
    from tensorboard.summary import Writer

    for r in range(runs):
        writer = Writer(str(root / f"run{r:03d}"))
        for step in range(points):
            writer.add_scalar("train/loss", 2.0 * math.exp(-step / points * 5) + 0.01 * r, step)
            if step % 100 == 99:
                writer.add_scalar("eval/loss", 2.1 * math.exp(-step / points * 5), step)
                writer.add_scalar("eval/accuracy", 1 - math.exp(-step / points * 5), step)
        writer.close()


def read_tensorboard(root: Path) -> int:
    from tensorboard.backend.event_processing import event_accumulator

    count = 0
    for run in sorted(p for p in root.iterdir() if p.is_dir()):
        acc = event_accumulator.EventAccumulator(
            str(run), size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0}
        )
        acc.Reload()
        for tag in acc.Tags()["tensors"]:
            count += len(acc.Tensors(tag))
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    ns = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-import-"))
    try:
        logdir = work / "logdir"
        write_logdir(logdir, ns.runs, ns.points)
        size = sum(f.stat().st_size for f in logdir.rglob("*") if f.is_file())
        read_tensorboard(logdir)  # warm: TensorBoard's imports, the page cache
        times: dict[str, list[float]] = {"read, tensortap": [], "read, TensorBoard": []}
        times["import (read, judge, write)"] = []
        values = 0
        for i in range(ns.repeat):  # interleaved rounds
            start = time.process_time()
            values = sum(len(s.values) for run in read_runs(logdir) for s in run.series)
            times["read, tensortap"].append(time.process_time() - start)
            start = time.process_time()
            assert read_tensorboard(logdir) == values
            times["read, TensorBoard"].append(time.process_time() - start)
            out = work / f"out{i}"
            start = time.process_time()
            import_runs(logdir, out)
            times["import (read, judge, write)"].append(time.process_time() - start)
            shutil.rmtree(out)
        print(
            f"{ns.runs} runs x {ns.points} steps: {values} scalars, {size / 1e6:.1f} MB of event "
            f"files; {ns.repeat} interleaved rounds; {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
        )
        base = statistics.median(times["read, TensorBoard"])
        for name, got in times.items():
            median = statistics.median(got)
            print(
                f"  {name:30s} median {median:6.2f} CPU s  ({median / base:4.2f}x TensorBoard's "
                f"read; {values / median / 1e3:6.0f} k scalars/s)"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
