"""A JAX + Optax script: an MLP on the digits. Without options it has no tensortap in it.

    python jax_script.py [--lr LR] [--steps N] [--sleep S] [--sgd-by-hand] [--own-hook OUT]

``--sgd-by-hand`` updates the parameters without Optax (``p - lr * g``); ``--own-hook OUT``
makes its own ``tensortap.jax.Hook`` writing to OUT, as docs/jax.md shows.
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from sklearn.datasets import load_digits

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.5)
parser.add_argument("--steps", type=int, default=150)
parser.add_argument("--sleep", type=float, default=0.0, help="seconds between steps")
parser.add_argument("--sgd-by-hand", action="store_true")
parser.add_argument("--own-hook")
args = parser.parse_args()

x, y = load_digits(return_X_y=True)
x = (x / 16.0).astype(np.float32)
k1, k2 = jax.random.split(jax.random.PRNGKey(0))
params = {
    "hidden": {"kernel": jax.random.normal(k1, (64, 32)) * 0.125, "bias": jnp.zeros(32)},
    "out": {"kernel": jax.random.normal(k2, (32, 10)) * 0.18, "bias": jnp.zeros(10)},
}


def loss_fn(p, xb, yb):
    h = jax.nn.relu(xb @ p["hidden"]["kernel"] + p["hidden"]["bias"])
    logits = h @ p["out"]["kernel"] + p["out"]["bias"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()


hook = None
optimizer = optax.sgd(args.lr)
if args.own_hook:
    import tensortap.jax as ttj

    hook = ttj.Hook(
        args.own_hook,
        save_config=ttj.SaveConfig(save_interval=10),
        include_collections=["losses", "gradients", "weights", "biases"],
    )
    hook.get_collection("gradients").reduction_config = ttj.ReductionConfig(
        reductions=["min", "max", "mean"], abs_reductions=["max", "mean"], norms=["l2"]
    )
    # gradients named gradient/params/<path>, beside the weights params/<path>
    optimizer = optax.chain(ttj.record(hook, prefix="gradient/params", via="state"), optimizer)
state = optimizer.init(params)


@jax.jit
def step(p, s, xb, yb):
    loss, grads = jax.value_and_grad(loss_fn)(p, xb, yb)
    if args.sgd_by_hand:
        return jax.tree.map(lambda w, g: w - args.lr * g, p, grads), s, loss
    updates, s = optimizer.update(grads, s, p)
    return optax.apply_updates(p, updates), s, loss


rng = np.random.default_rng(0)
for _ in range(args.steps):
    batch = rng.choice(len(x), 128, replace=False)
    params, state, loss = step(params, state, x[batch], y[batch])
    if hook is not None:
        hook.save_scalar("loss", loss, "losses")
        hook.save_pytree(params, "params")
        hook.end_step(state)
    time.sleep(args.sleep)
print(f"trained {args.steps} steps: loss {float(loss):.3f}")
