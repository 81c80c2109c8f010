"""A Flax (Linen) MLP trained with Optax on scikit-learn's digits, debugged by tensortap: once
with a sane learning rate and once with one far too high; the recommended rules judge both.

Gradient statistics come from inside the jitted step (``tensortap.jax.record`` first in the
Optax chain, carrying them out in the optimizer state: no host callback in the compiled step);
the loss and the parameters are saved after each step, and ``hook.end_step(state)`` ends it.

    python examples/jax_flax.py [--quick] [--out runs/jax]
"""

from __future__ import annotations

import argparse
import logging
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from sklearn.datasets import load_digits

import tensortap as tt
import tensortap.jax as ttj
from tensortap.report import rules_that_find_problems


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.relu(nn.Dense(32)(x))
        return nn.Dense(10)(x)


def train(out: str, lr: float, steps: int) -> str:
    """Train with learning rate ``lr``; returns where the trial is."""
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    hook = ttj.Hook(
        out,
        save_config=ttj.SaveConfig(save_interval=5),
        include_collections=["losses", "gradients", "weights", "biases"],
    )
    hook.get_collection("losses").save_config = ttj.SaveConfig(save_interval=1)
    hook.get_collection("gradients").reduction_config = ttj.ReductionConfig(
        reductions=["min", "max", "mean"], abs_reductions=["mean"], norms=["l2"]
    )
    model = MLP()
    variables = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 64)))
    optimizer = optax.chain(ttj.record(hook, via="state"), optax.sgd(lr))
    state = optimizer.init(variables)

    @jax.jit
    def step(variables, state, xb, yb):  # type: ignore[no-untyped-def]
        def loss_fn(v):  # type: ignore[no-untyped-def]
            logits = model.apply(v, xb)
            return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()

        loss, grads = jax.value_and_grad(loss_fn)(variables)
        updates, state = optimizer.update(grads, state, variables)
        return optax.apply_updates(variables, updates), state, loss

    rng = np.random.default_rng(0)
    for _ in range(steps):
        batch = rng.choice(len(x), 256, replace=False)
        variables, state, loss = step(variables, state, x[batch], y[batch])
        hook.save_scalar("loss", loss, "losses")
        hook.save_pytree(variables)  # params/Dense_0/kernel, ...: weights and biases
        hook.end_step(state)  # this step's gradient statistics, then the next step
    hook.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer steps (the tests use it)")
    parser.add_argument("--out", default="runs/jax")
    args = parser.parse_args()
    logging.getLogger("tensortap.rules").setLevel(logging.ERROR)  # the verdicts are printed
    steps = 40 if args.quick else 100
    runs = (("healthy", "healthy (lr 0.5)", 0.5), ("lr-60", "learning rate far too high", 60.0))
    for name, label, lr in runs:
        path = train(os.path.join(args.out, name), lr, steps)
        loss = tt.create_trial(path).tensor("loss")
        first, last = loss.steps()[0], loss.steps()[-1]
        print(f"{label}: trial {path}")
        print(
            f"  loss {loss.value(first).item():.3g} at step {first}, "
            f"{loss.value(last).item():.3g} at step {last}"
        )
        found = rules_that_find_problems(path)
        print(f"  rules that found a problem: {', '.join(found) or 'none'}")


if __name__ == "__main__":
    main()
