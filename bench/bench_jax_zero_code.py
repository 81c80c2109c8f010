"""What JAX zero code change costs on a small, fast jitted Flax (Linen) + Optax step (CPU).

The same unmodified script runs plain and under ``python -m tensortap.attach`` with a job's
hook configuration (the recommended JAX rules' collections, every 10th step, the vital signs
every step), each in its own process, taking turns round by round so the machine's drift
hits them alike. Each process times ``--steps`` steps after a warm-up (the loop does not wait
for a step, as a fast loop does not; it waits once at the end) and prints the wall and CPU
seconds per step. The figures are medians over ``--rounds`` rounds, and their ratios to the
plain script:

- ``zero code (state)``: the default: the optimizer state carries each step's vital signs
  and a due step's arrays, read back on the host at saving steps (attach/_jax_state.py);
- ``zero code (callbacks)``: the same script calling ``optimizer.update(grads, state)``
  without the parameters, which keeps the host callbacks in the step (as a Flax NNX
  ``nnx.Optimizer`` does).

- ``zero code (state), save budget off``: the default with the job's save budget off (a job
  has it on: core._save_budget), to show what the budget saves.

- ``zero code (state), before``: with ``--before SRC``, the default route of the tensortap
  at ``SRC`` (another checkout's ``src``, put first on ``PYTHONPATH``), to compare a change.

    .venv/bin/python bench/bench_jax_zero_code.py [--rounds 7] [--steps 2000]
        [--hidden 32] [--batch 32] [--before /path/to/other/src]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = """
import sys, time
import jax, jax.numpy as jnp, numpy as np, optax
import flax.linen as nn
from flax.training import train_state

steps, with_params = int(sys.argv[1]), sys.argv[2] == "params"
hidden, batch = int(sys.argv[3]), int(sys.argv[4])

class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(10)(nn.relu(nn.Dense(hidden)(x)))

model = MLP()
params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 64)))["params"]
tx = optax.sgd(0.05, momentum=0.9)
opt_state = tx.init(params)
rng = np.random.default_rng(0)
x = jnp.asarray(rng.normal(size=(batch, 64)), jnp.float32)
y = jnp.asarray(rng.integers(0, 10, batch))

@jax.jit
def step(params, opt_state):
    def loss_fn(p):
        logits = model.apply({"params": p}, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    loss, grads = jax.value_and_grad(loss_fn)(params)
    if with_params:
        updates, opt_state = tx.update(grads, opt_state, params)
    else:
        updates, opt_state = tx.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state, loss

for _ in range(200):  # compile and warm up
    params, opt_state, loss = step(params, opt_state)
loss.block_until_ready()
wall, cpu = time.perf_counter(), time.process_time()
for _ in range(steps):
    params, opt_state, loss = step(params, opt_state)
loss.block_until_ready()
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
print("RESULT", wall / steps, cpu / steps, float(loss))
"""

CONFIGS = {
    "plain": ("params", False),
    "zero code (state)": ("params", True),
    "zero code (callbacks)": ("no-params", True),
}
BEFORE = "zero code (state), before"


BUDGET_OFF = "zero code (state), save budget off"


def job_config(out: Path, budget: str | None = None) -> Path:
    """The hook configuration a job writes for the recommended JAX rules (``budget``: its
    save budget, ``"off"``; None: the job's default, core._save_budget)."""
    from tensortap.jobs._specs import DebuggerHookConfig, Rule, hook_config
    from tensortap.rules.rule_configs import recommended

    rules = [Rule.builtin(config) for config in recommended("jax")]
    given = None if budget is None else DebuggerHookConfig(hook_parameters={"save_budget": budget})
    suffix = "" if budget is None else f"-{budget}"
    config = hook_config(str(out / f"trial{suffix}"), given, rules, None)
    path = out / f"hook{suffix}.json"
    path.write_text(json.dumps(config.to_dict()))
    return path


def run(
    script: Path,
    config: Path,
    args: argparse.Namespace,
    params: str,
    attached: bool,
    src: str | None = None,
) -> tuple[float, float]:
    """One process: wall and CPU seconds per step (with the tensortap at ``src`` if given)."""
    for old in config.parent.glob("trial*"):
        shutil.rmtree(old)
    cmd = [sys.executable]
    if attached:
        cmd += ["-m", "tensortap.attach", "--config", str(config)]
    cmd += [str(script), str(args.steps), params, str(args.hidden), str(args.batch)]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    line = [s for s in done.stdout.splitlines() if s.startswith("RESULT")][-1]
    _, wall, cpu, _ = line.split()
    return float(wall), float(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--hidden", type=int, default=32, help="the MLP's hidden units")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--before", help="another checkout's src, run as a configuration too")
    args = parser.parse_args()
    configs: dict[str, tuple[str, bool, str | None]] = {
        name: (*c, None) for name, c in CONFIGS.items()
    }
    configs[BUDGET_OFF] = ("params", True, None)
    if args.before:
        configs[BEFORE] = ("params", True, str(Path(args.before).resolve()))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        script = root / "train.py"
        script.write_text(SCRIPT)
        config, config_off = job_config(root), job_config(root, "off")
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in configs}
        loads: list[float] = []
        for _ in range(args.rounds):
            loads.append(os.getloadavg()[0])
            for name, (params, attached, src) in configs.items():
                given = config_off if name == BUDGET_OFF else config
                times[name].append(run(script, given, args, params, attached, src))
    plain_wall = statistics.median(w for w, _ in times["plain"])
    plain_cpu = statistics.median(c for _, c in times["plain"])
    print(f"load average (1 min) over the rounds: {min(loads):.1f} to {max(loads):.1f}")
    print(f"{'configuration':34} {'wall/step':>10} {'ratio':>6} {'CPU/step':>10} {'ratio':>6}")
    for name, rows in times.items():
        wall = statistics.median(w for w, _ in rows)
        cpu = statistics.median(c for _, c in rows)
        print(
            f"{name:34} {wall * 1e6:8.1f}us {wall / plain_wall:5.2f}x "
            f"{cpu * 1e6:8.1f}us {cpu / plain_cpu:5.2f}x"
        )


if __name__ == "__main__":
    main()
