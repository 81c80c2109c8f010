"""Following a TensorBoard logdir while it is served (issue 47, item 4): what one check of
:class:`tensortap.trackers.FollowedImport` costs, in CPU time of this process
(``time.process_time``), medians of ``--repeat`` rounds, over ``--runs`` runs of ``--points``
scalars (written as ``bench_import`` writes them, by the ``tensorboard`` package's writer):

- *unchanged*: a check of the logdir as it was (the ``stat`` walk; nothing read; the removal
  of the trial swapped out at the check before is done first, not timed);
- *one run grew*: a check after ``--grow`` more steps were written into one run (the logdir
  read again; that run alone judged and written again);
- *import at start*: what ``serve`` did once before following (read, judge, write all runs).

    PYTHONPATH=src .venv/bin/python bench/bench_follow.py [--runs 10] [--points 2000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from bench.bench_import import write_logdir
from tensortap.trackers import FollowedImport


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--points", type=int, default=2000)
    parser.add_argument("--grow", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from tensorboard.summary import Writer

    with tempfile.TemporaryDirectory(prefix="bench-follow-") as place:
        root = Path(place)
        write_logdir(root / "logs", args.runs, args.points)
        started = time.process_time()
        follower = FollowedImport(root / "logs", root / "imported", root / "next")
        follower.start()
        imported = time.process_time() - started
        unchanged: list[float] = []
        grew: list[float] = []
        writer = Writer(str(root / "logs" / "run000"))
        step = args.points
        for _ in range(args.repeat):
            follower.check(force=True)  # removes the trial swapped out last round: not timed
            started = time.process_time()
            changes = follower.check(force=True)
            unchanged.append(time.process_time() - started)
            assert not changes, changes
            for _ in range(args.grow):
                writer.add_scalar("train/loss", 2.0 * math.exp(-step / args.points * 5), step)
                step += 1
            writer.flush()
            started = time.process_time()
            changes = follower.check(force=True)
            grew.append(time.process_time() - started)
            assert len(changes.moved) == 1, changes
        writer.close()
        print(
            f"{args.runs} runs of {args.points} steps, {args.repeat} rounds, "
            f"{platform.machine()}, load average {os.getloadavg()[0]:.1f}"
        )
        print(f"unchanged check     median {statistics.median(unchanged) * 1000:.1f} ms CPU")
        print(f"one run grew check  median {statistics.median(grew):.2f} s CPU")
        print(f"import at start     {imported:.2f} s CPU")
        print(f"reads {follower.reads}, trials written {follower.writes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
