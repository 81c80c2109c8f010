"""What Keras zero code change costs on a small MLP's ``fit``, each configuration in its own
process (Keras 3, TensorFlow backend, CPU, one intra-op and one inter-op thread).

``bench_keras.py`` runs its configurations in turns within one process, so a hook's trial
writer thread, still encoding after its ``fit``, is counted in the next configuration's CPU
time. Here each run is a fresh process: a warm-up ``fit`` of 100 batches (it traces the
functions), then one timed ``fit`` of ``--steps`` batches and the hook's ``close`` (what is
left to write counts). The configurations take turns round by round so the machine's drift
hits them alike; the figures are medians over ``--rounds`` of the process's CPU time (and wall
time) per batch, and their ratios to the plain run:

- ``plain``: no hook;
- ``vital signs only``: ``KerasHook(include_collections=["vitals"])``;
- ``job default``: the hook ``tensortap run`` attaches (the recommended rules' collections,
  every 10th TRAIN step under the job's save budget, the vital signs every batch);
- ``job default, before``: with ``--before SRC``, the job default of the tensortap at ``SRC``
  (another checkout's ``src``), to compare a change.

    .venv/bin/python bench/bench_keras_fit.py [--rounds 5] [--steps 2000] [--before SRC]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RUN = """
import os, sys, tempfile, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
from pathlib import Path
import keras, numpy as np, tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
sys.path.insert(0, sys.argv[3])
from bench.bench_keras import job_hook, mlp
import tensortap.keras as tt

config, steps = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
x = rng.standard_normal((32 * steps, 64)).astype("float32")
y = rng.integers(0, 10, 32 * steps)
out = Path(tempfile.mkdtemp())
hook = None
if config == "vitals":
    hook = tt.KerasHook(out / "vitals", include_collections=["vitals"])
elif config == "job":
    hook = job_hook(out)
keras.utils.set_random_seed(0)
model = mlp()
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
callbacks = [] if hook is None else [hook]
model.fit(x[:3200], y[:3200], batch_size=32, verbose=0, callbacks=callbacks)
wall, cpu = time.perf_counter(), time.process_time()
model.fit(x, y, batch_size=32, verbose=0, callbacks=callbacks)
if hook is not None:
    hook.close()
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
print("RESULT", wall / steps, cpu / steps)
"""

#: label -> (configuration in the child, whether it runs the tensortap at --before)
CONFIGS = {
    "plain": ("plain", False),
    "vital signs only": ("vitals", False),
    "job default": ("job", False),
}
BEFORE = "job default, before"


def run(script: Path, config: str, steps: int, src: Path) -> tuple[float, float]:
    """One process: wall and CPU seconds per batch, with the tensortap at ``src``."""
    # the job's default save budget, whatever this shell sets
    env = {k: v for k, v in os.environ.items() if k != "TENSORTAP_SAVE_BUDGET"}
    env["PYTHONPATH"] = str(src)
    cmd = [sys.executable, str(script), config, str(steps), str(ROOT)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    line = [s for s in done.stdout.splitlines() if s.startswith("RESULT")][-1]
    _, wall, cpu = line.split()
    return float(wall), float(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--before", help="another checkout's src, run as a configuration too")
    args = parser.parse_args()
    configs = {label: (config, ROOT / "src") for label, (config, _) in CONFIGS.items()}
    if args.before:
        configs[BEFORE] = ("job", Path(args.before).resolve())
    walls: dict[str, list[float]] = {label: [] for label in configs}
    cpus: dict[str, list[float]] = {label: [] for label in configs}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "fit.py"
        script.write_text(RUN)
        for _ in range(args.rounds):
            for label, (config, src) in configs.items():
                wall, cpu = run(script, config, args.steps, src)
                walls[label].append(wall)
                cpus[label].append(cpu)
    base_wall, base_cpu = statistics.median(walls["plain"]), statistics.median(cpus["plain"])
    print(
        f"Keras MLP fit, batches of 32x64, {args.steps} batches a process, {args.rounds} "
        "rounds (medians; CPU: the process's):"
    )
    for label in configs:
        wall, cpu = statistics.median(walls[label]), statistics.median(cpus[label])
        print(
            f"  {label:22s} wall {1000 * wall:6.3f} ms {wall / base_wall:5.3f}x;"
            f"  CPU {1000 * cpu:6.3f} ms {cpu / base_cpu:5.3f}x"
        )


if __name__ == "__main__":
    main()
