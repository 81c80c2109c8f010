"""An Optax (Adam) script on the digits, with no tensortap in it, that saves its own checkpoint
with NumPy and restarts from it:

    python resume_script.py LAST CHECKPOINT_AFTER CKPT.npz [--restore] [--names haiku] [--lr LR]

trains the steps up to LAST (exclusive), from 0 or, with ``--restore``, from the checkpoint's
step; after step CHECKPOINT_AFTER - 1 it writes (params, opt_state) and the step to CKPT.npz.
It prints one JSON line: each step's loss and gradient norm, as the script computes them.
``--names haiku`` names the parameters as Haiku does (``linear/w``, ``linear/b``) plus a plain
``w1``/``b0`` pair.
"""

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
from sklearn.datasets import load_digits

parser = argparse.ArgumentParser()
parser.add_argument("last", type=int)
parser.add_argument("checkpoint_after", type=int)
parser.add_argument("ckpt")
parser.add_argument("--restore", action="store_true")
parser.add_argument("--names", default="flax")
parser.add_argument("--lr", type=float, default=1e-2)
args = parser.parse_args()

x, y = load_digits(return_X_y=True)
x = (x / 16.0).astype(np.float32)
k1, k2 = jax.random.split(jax.random.PRNGKey(0))
w0, w1 = jax.random.normal(k1, (64, 32)) * 0.125, jax.random.normal(k2, (32, 10)) * 0.18
if args.names == "haiku":
    params = {"linear": {"w": w0, "b": jnp.zeros(32)}, "w1": w1, "b0": jnp.zeros(10)}
    first, second = ("linear", "w"), ("linear", "b")
else:
    params = {"hidden": {"kernel": w0, "bias": jnp.zeros(32)}, "w1": w1, "b0": jnp.zeros(10)}
    first, second = ("hidden", "kernel"), ("hidden", "bias")


def loss_fn(p, xb, yb):
    layer = p[first[0]]
    h = jax.nn.relu(xb @ layer[first[1]] + layer[second[1]])
    logits = h @ p["w1"] + p["b0"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()


optimizer = optax.adam(args.lr)
state = optimizer.init(params)
start = 0
if args.restore:
    saved = np.load(args.ckpt)
    treedef = jax.tree.structure((params, state))
    leaves = [jnp.asarray(saved[f"leaf{i}"]) for i in range(treedef.num_leaves)]  # type: ignore[attr-defined]
    params, state = jax.tree.unflatten(treedef, leaves)
    start = int(saved["step"])


@jax.jit
def step(p, s, xb, yb):
    loss, grads = jax.value_and_grad(loss_fn)(p, xb, yb)
    updates, s = optimizer.update(grads, s, p)
    return optax.apply_updates(p, updates), s, loss, optax.tree.norm(grads)


log = {}
for i in range(start, args.last):
    batch = np.random.default_rng(i).choice(len(x), 128, replace=False)
    params, state, loss, norm = step(params, state, x[batch], y[batch])
    log[i] = [float(loss), float(norm)]
    if i + 1 == args.checkpoint_after:
        leaves = jax.tree.leaves((params, state))
        arrays = {f"leaf{j}": np.asarray(a) for j, a in enumerate(leaves)}
        np.savez(args.ckpt, step=i + 1, **arrays)  # type: ignore[arg-type]
print(json.dumps(log))
