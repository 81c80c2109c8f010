"""What the core costs to publish one step (recorder and writer), whatever the framework.

A step of the 5 vital signs (``hook.save_vitals``) or of 30 small float32 tensors
(``hook.save_tensor`` in a collection saved every step), then ``hook.next_step()``, through the
framework-free ``tensortap.Hook`` on local disk; or (``blocks``) ``--block`` steps of the 5
vital signs published at once (``StepRecorder.publish_scalar_steps``, as the zero-code
attachments publish what they read back; a tree without it takes them step by step). Each
run is its own process: warm-up steps, then the timed steps, then a flush. CPU per step of
the training thread (``time.thread_time``) and of the rest of the process (the writer
thread, its publications included). With ``--before SRC`` another checkout's ``src`` takes
turns with this one, round by round; the figures are medians over ``--rounds``.

    .venv/bin/python bench/bench_publish_floor.py [--what vitals|tensors|blocks] [--rounds 7]
        [--steps 20000] [--block 128] [--before /path/to/other/src]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import json, sys, tempfile, time
import numpy as np
import tensortap

what, steps = sys.argv[1], int(sys.argv[2])
kw = {}
if what == "tensors":
    kw = dict(include_collections=["weights"], save_config=tensortap.SaveConfig(save_interval=1))
hook = tensortap.Hook(out_dir=tempfile.mkdtemp(), **kw)
vitals = {"loss": 2.3, "grad_norm": 0.8, "lr": 1e-3, "update_norm": 1e-3, "step_time": 0.01}
tensors = [np.full((8,), i, dtype=np.float32) for i in range(30)]


block = int(sys.argv[3])
names = [f"vitals/{k}" for k in vitals]
publish = getattr(hook._recorder, "publish_scalar_steps", None)  # absent before issue 43's blocks


def blocks(i):
    # ``block`` steps of the 5 vital signs read back together (as the zero-code attachments
    # do): one call where the tree has it, else each step as the attachments did before
    first = hook._recorder.mode_step
    if publish is None:
        for s in range(block):
            hook.save_vitals({k: v + i + s for k, v in vitals.items()})
            hook.next_step()
        return
    ramp = np.arange(block, dtype=np.float64) + i
    columns = {n: ramp + v for n, v in zip(names, vitals.values())}
    with hook._lock:
        publish(range(first, first + block), columns, ("vitals",))


def step(i):
    if what == "blocks":
        return blocks(i)
    if what == "vitals":
        hook.save_vitals({k: v + i for k, v in vitals.items()})
    else:
        for j, t in enumerate(tensors):
            hook.save_tensor(f"w{j}", t, "weights")
    hook.next_step()


calls = steps // block if what == "blocks" else steps
for i in range(200 // block if what == "blocks" else 200):
    step(i)
hook._writer.flush()
p0, t0 = time.process_time(), time.thread_time()
for i in range(calls):
    step(i)
t1 = time.thread_time()
hook._writer.flush()
p1 = time.process_time()
hook.close()
train = (t1 - t0) / steps
print(json.dumps({"train": train, "writer": (p1 - p0) / steps - train}))
"""


def _run(src: str, what: str, steps: int, block: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, what, str(steps), str(block)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", choices=["vitals", "tensors", "blocks"], default="vitals")
    parser.add_argument(
        "--block", type=int, default=128, help="blocks: steps read back and published together"
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--before", help="another checkout's src, to compare a change")
    args = parser.parse_args()
    here = str(Path(__file__).resolve().parents[1] / "src")
    trees = {"this tree": here}
    if args.before:
        trees["before"] = str(Path(args.before).resolve())
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    print(f"load average (1 min) at the start: {os.getloadavg()[0]:.1f}")
    for _ in range(args.rounds):
        for name, src in trees.items():
            runs[name].append(_run(src, args.what, args.steps, args.block))
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.1f}")
    print(f"{args.what}: CPU per step, medians of {args.rounds} rounds")
    print(f"{'tree':<12}{'training':>12}{'writer':>12}{'both':>12}")
    for name, rows in runs.items():
        train = statistics.median(r["train"] for r in rows) * 1e6
        writer = statistics.median(r["writer"] for r in rows) * 1e6
        both = statistics.median(r["train"] + r["writer"] for r in rows) * 1e6
        print(f"{name:<12}{train:>10.1f}us{writer:>10.1f}us{both:>10.1f}us")


if __name__ == "__main__":
    main()
