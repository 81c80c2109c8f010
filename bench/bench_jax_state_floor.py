"""What the JAX attachment's design costs inside a small jitted step, with no host work at all.

The zero-code JAX attachment keeps each step's vital signs and a due step's arrays in the
optimizer state (``attach/_jax_state.py``) and reads them on the host only at saving steps.
This benchmark takes the host out entirely and times, on the bench's small Flax step
(``bench_jax_zero_code.py``'s: a 64 -> hidden -> 10 MLP, ``optax.sgd(0.05, momentum=0.9)``, one
fixed batch), three jitted steps in turn in one process:

- ``plain``: the script's step;
- ``+ the tap's two arrays, untouched``: the same step taking and returning the two arrays the
  tap adds to the state (``init_tap``'s ring and ``kept``), doing nothing with them: the cost of
  carrying state at all;
- ``+ the shipped in-step work``: what the attachment adds to a step, with its own functions
  (``_vital_values``: the loss, the gradients' and the update's norms, the learning rate;
  ``tap_steps`` and ``tap_update``: the ring row, the header, the ``lax.cond`` keeping every
  10th step's gradients and parameters).

Each configuration runs ``--steps`` steps after a warm-up, the loop never waiting on a step (it
waits once at the end), taking turns round by round; figures are medians over ``--rounds`` of
the process's CPU time (all threads) and wall time per step, and their ratios to ``plain``. It
prints what 1.10x of the plain step allows, in microseconds.

    .venv/bin/python bench/bench_jax_state_floor.py [--rounds 7] [--steps 2000]
        [--hidden 32] [--batch 32]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

from tensortap.attach._jax import _vital_values
from tensortap.attach._jax_state import TapState, init_tap, tap_steps, tap_update

CONFIGS = ("plain", "+ the tap's two arrays, untouched", "+ the shipped in-step work")


def make_steps(hidden: int, batch: int) -> tuple[dict[str, Callable[..., Any]], Any, Any]:
    """The three jitted steps, the initial parameters and the optimizer."""

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x: Any) -> Any:
            return nn.Dense(10)(nn.relu(nn.Dense(hidden)(x)))

    model = MLP()
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 64)))["params"]
    tx = optax.sgd(0.05, momentum=0.9)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(batch, 64)), jnp.float32)
    y = jnp.asarray(rng.integers(0, 10, batch))

    def train(params: Any, opt_state: Any) -> tuple[Any, Any, Any, Any, Any]:
        def loss_fn(p: Any) -> Any:
            logits = model.apply({"params": p}, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, new_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_state, loss, grads, updates

    @jax.jit
    def plain(params: Any, opt_state: Any) -> Any:
        new, opt_state, loss, _, _ = train(params, opt_state)
        return new, opt_state, loss

    @jax.jit
    def carried(params: Any, opt_state: Any, ring: Any, kept: Any) -> Any:
        new, opt_state, loss, _, _ = train(params, opt_state)
        return new, opt_state, loss, ring, kept

    @jax.jit
    def shipped(params: Any, opt_state: Any, ring: Any, kept: Any) -> Any:
        new, new_state, loss, grads, updates = train(params, opt_state)
        tap = TapState(ring, kept)
        vitals = _vital_values(loss, grads, updates, new_state)
        step = tap_steps(tap, jnp.int32(-1))
        tap = tap_update(tap, step, vitals, grads, new, step % 10 == 0)
        return new, new_state, loss, tap.ring, tap.kept

    return {CONFIGS[0]: plain, CONFIGS[1]: carried, CONFIGS[2]: shipped}, params, tx


def run(step: Callable[..., Any], params: Any, tx: Any, steps: int) -> tuple[float, float]:
    """Wall and CPU seconds per step of ``steps`` steps after a warm-up."""
    opt_state = tx.init(params)
    extra: tuple[Any, ...] = ()
    if step.__name__ != "plain":
        tap = init_tap(params)
        extra = (tap.ring, tap.kept)
    for _ in range(200):  # compile and warm up
        params, opt_state, loss, *extra = step(params, opt_state, *extra)
    loss.block_until_ready()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        params, opt_state, loss, *extra = step(params, opt_state, *extra)
    loss.block_until_ready()
    return (time.perf_counter() - wall) / steps, (time.process_time() - cpu) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    steps, params, tx = make_steps(args.hidden, args.batch)
    walls: dict[str, list[float]] = {name: [] for name in CONFIGS}
    cpus: dict[str, list[float]] = {name: [] for name in CONFIGS}
    loads = []
    for _ in range(args.rounds):
        for name in CONFIGS:
            wall, cpu = run(steps[name], params, tx, args.steps)
            walls[name].append(wall)
            cpus[name].append(cpu)
        loads.append(os.getloadavg()[0])
    base_wall, base_cpu = statistics.median(walls["plain"]), statistics.median(cpus["plain"])
    print(
        f"JAX {jax.__version__} ({jax.default_backend()}), hidden {args.hidden}, batch "
        f"{args.batch}: {args.rounds} rounds of {args.steps} steps, medians; load average "
        f"{min(loads):.1f} to {max(loads):.1f}"
    )
    print(f"{'configuration':36s} {'wall/step':>10s} {'ratio':>6s} {'CPU/step':>10s} {'ratio':>6s}")
    for name in CONFIGS:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        print(
            f"{name:36s} {1e6 * wall:8.1f}us {wall / base_wall:5.2f}x "
            f"{1e6 * cpu:8.1f}us {cpu / base_cpu:5.2f}x"
        )
    print(f"1.10x of the plain step allows {1e5 * base_cpu:.1f}us of CPU a step for everything")


if __name__ == "__main__":
    main()
