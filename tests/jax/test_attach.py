"""JAX without code changes, Flax NNX states and the weights before the first update: real
Optax loops on the CPU, and scripts run through ``python -m tensortap.attach``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
optax = pytest.importorskip("optax")
import jax.numpy as jnp  # noqa: E402

import tensortap as tt  # noqa: E402
import tensortap.jax as ttj  # noqa: E402
from tensortap.rules import WeightUpdateRatio, invoke_rule  # noqa: E402


def test_flax_nnx_params_are_saved_as_weights_and_biases(tmp_path: Path) -> None:
    """``nnx.state(model, nnx.Param)`` has paths such as ``l1/kernel`` (no ``params/``): its
    arrays are the model's weights and biases all the same; batch statistics are not."""
    pytest.importorskip("flax.nnx")
    from flax import nnx

    class Model(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.l1 = nnx.Linear(4, 8, rngs=rngs)
            self.bn = nnx.BatchNorm(8, rngs=rngs)
            self.l2 = nnx.Linear(8, 2, rngs=rngs)

    model = Model(nnx.Rngs(0))
    hook = ttj.Hook(
        tmp_path,
        save_config=ttj.SaveConfig(save_interval=1),
        include_collections=["weights", "biases"],
    )
    assert hook.save_pytree(nnx.state(model, nnx.Param)) == 6
    assert hook.save_pytree(nnx.state(model)) == 6  # the batch statistics join neither
    hook.close()
    trial = tt.create_trial(tmp_path)
    assert trial.tensor_names(collection="weights") == ["bn/scale", "l1/kernel", "l2/kernel"]
    assert trial.tensor_names(collection="biases") == ["bn/bias", "l1/bias", "l2/bias"]
    kernel = np.asarray(nnx.state(model, nnx.Param)["l1"]["kernel"].get_value())  # type: ignore[operator]
    np.testing.assert_array_equal(trial.tensor("l1/kernel").value(0), kernel)


def _digits_mlp(out: Path, lr: float, steps: int) -> tt.Trial:
    """An MLP on the digits trained by Optax SGD (record carrying the gradients' statistics),
    the weights saved after each step as the docs show; the job's save interval (10)."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    hook = ttj.Hook(
        out,
        save_config=ttj.SaveConfig(save_interval=10),
        include_collections=["losses", "gradients", "weights", "biases"],
    )
    hook.get_collection("gradients").reduction_config = ttj.ReductionConfig(
        reductions=["min", "max", "mean"], abs_reductions=["max", "mean"], norms=["l2"]
    )
    key1, key2 = jax.random.split(jax.random.PRNGKey(0))
    params = {
        "params": {
            "hidden": {"kernel": jax.random.normal(key1, (64, 32)) * 0.125, "bias": jnp.zeros(32)},
            "out": {"kernel": jax.random.normal(key2, (32, 10)) * 0.18, "bias": jnp.zeros(10)},
        }
    }
    optimizer = optax.chain(ttj.record(hook, via="state"), optax.sgd(lr))
    state = optimizer.init(params)

    def loss_fn(p, xb, yb):
        h = jax.nn.relu(xb @ p["params"]["hidden"]["kernel"] + p["params"]["hidden"]["bias"])
        logits = h @ p["params"]["out"]["kernel"] + p["params"]["out"]["bias"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()

    @jax.jit
    def step(p, s, xb, yb):
        loss, grads = jax.value_and_grad(loss_fn)(p, xb, yb)
        updates, s = optimizer.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    rng = np.random.default_rng(0)
    for _ in range(steps):
        batch = rng.choice(len(x), 128, replace=False)
        params, state, loss = step(params, state, x[batch], y[batch])
        hook.save_scalar("loss", loss, "losses")
        hook.save_pytree(params)
        hook.end_step(state)
    hook.close()
    return tt.create_trial(out)


def test_the_weights_before_the_first_update_are_saved(tmp_path: Path) -> None:
    """At a learning rate 50 times too high, a run short enough to save its weights once is
    judged by WeightUpdateRatio all the same: against the weights the optimizer started from
    (``initial/...``, from the optimizer's init)."""
    trial = _digits_mlp(tmp_path / "high", 25.0, 5)
    initial = trial.tensor_names(collection="initial_weights")
    assert "initial/params/hidden/kernel" in initial
    assert trial.tensor("params/hidden/kernel").steps() == [0]  # saved once
    summary = invoke_rule(WeightUpdateRatio(trial))
    first = summary.findings[0]  # then the loss diverges from it: the learning rate (a problem)
    assert first.step == 0 and first.details["first_update"], summary
    assert [f.details.get("diverged") for f in summary.findings] == [None, True], summary
    healthy = invoke_rule(WeightUpdateRatio(_digits_mlp(tmp_path / "healthy", 0.5, 5)))
    assert healthy.status.value == "NoIssuesFound", healthy


NNX_SCRIPT = """
import numpy as np, optax
from flax import nnx

class MLP(nnx.Module):
    def __init__(self, rngs):
        self.hidden = nnx.Linear(64, 32, rngs=rngs)
        self.out = nnx.Linear(32, 10, rngs=rngs)
    def __call__(self, x):
        return self.out(nnx.relu(self.hidden(x)))

model = MLP(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

@nnx.jit
def train_step(model, optimizer, xb, yb):
    def loss_fn(m):
        return optax.softmax_cross_entropy_with_integer_labels(m(xb), yb).mean()
    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss
"""

LINEN_SCRIPT = """
import jax, jax.numpy as jnp, numpy as np, optax
import flax.linen as nn
from flax.training import train_state

class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(10, name="out")(nn.relu(nn.Dense(32, name="hidden")(x)))

model = MLP()
params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 64)))["params"]
state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.sgd(0.5))

@jax.jit
def step(state, xb, yb):
    def loss_fn(p):
        logits = state.apply_fn({"params": p}, xb)
        return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()
    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss

def train_step(model, optimizer, xb, yb):
    global state
    state, loss = step(state, xb, yb)
    return loss
model = optimizer = None
"""

LOOP = """
from sklearn.datasets import load_digits
x, y = load_digits(return_X_y=True)
x = (x / 16.0).astype(np.float32)
rng = np.random.default_rng(0)
for _ in range(21):
    b = rng.choice(len(x), 128, replace=False)
    loss = train_step(model, optimizer, x[b], y[b])
    if _ == 0:
        print("first loss", float(loss))
"""


@pytest.mark.parametrize("script", [NNX_SCRIPT, LINEN_SCRIPT], ids=["nnx-optimizer", "linen"])
def test_zero_code_change_watches_flax_training(tmp_path: Path, script: str) -> None:
    """A Flax NNX loop (``nnx.Optimizer``, ``nnx.value_and_grad``) and a Flax Linen one
    (``TrainState.apply_gradients``, ``jax.value_and_grad``), no tensortap in them: every
    optimizer update is a TRAIN step with the loss, gradients named beside the weights, and
    the weights before the first update."""
    pytest.importorskip("flax")
    import json
    import subprocess
    import sys

    (tmp_path / "train.py").write_text(script + LOOP)
    config = tmp_path / "hook.json"
    config.write_text(
        json.dumps(
            {
                "out_dir": str(tmp_path / "t"),
                "hook_parameters": {"save_interval": "10"},
                "collection_configurations": [
                    {"name": n} for n in ("losses", "gradients", "weights", "biases")
                ],
            }
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "tensortap.attach", "--config", str(config), "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    first = float(done.stdout.split("first loss")[1].split()[0])
    trial = tt.create_trial(tmp_path / "t")
    assert trial.framework() == "jax"
    assert trial.steps(mode=tt.modes.TRAIN) == list(range(21))  # the vital signs: every step
    assert trial.tensor("loss").steps(mode=tt.modes.TRAIN) == [0, 10, 20]
    assert trial.tensor("loss").value(0, mode=tt.modes.TRAIN) == pytest.approx(first)
    vitals = trial.tensor_names(collection="vitals")
    assert vitals == ["vitals/grad_norm", "vitals/loss", "vitals/step_time", "vitals/update_norm"]
    loss = trial.tensor("vitals/loss")
    assert loss.steps(mode=tt.modes.TRAIN) == list(range(21))
    assert loss.value(0, mode=tt.modes.TRAIN) == pytest.approx(first)
    weights = trial.tensor_names(collection="weights")
    assert weights == ["hidden/kernel", "out/kernel"]
    assert trial.tensor_names(collection="biases") == ["hidden/bias", "out/bias"]
    gradients = trial.tensor_names(collection="gradients")
    assert gradients == [
        f"gradient/{n}" for n in ("hidden/bias", *weights[:1], "out/bias", *weights[1:])
    ]
    assert trial.tensor_names(collection="initial_weights") == [f"initial/{n}" for n in weights]
    before = trial.tensor("initial/hidden/kernel").value(0)
    after = trial.tensor("hidden/kernel").value(0)
    assert before.shape == after.shape == (64, 32) and not np.array_equal(before, after)


def test_an_eager_steps_tap_compiles_nothing_new_at_each_step() -> None:
    """Outside ``jit`` the tap's update runs op by op: nothing may be compiled again at every
    step (a ``lax.cond`` of closures made anew each step was traced and compiled at every
    update: a 300-step eager loop ran 6x slower under ``tensortap run``)."""
    import jax.monitoring

    from tensortap.attach._jax_state import ROW, init_tap, tap_steps, tap_update

    compiles: list[str] = []

    def listen(event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event.endswith("backend_compile_duration"):
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    params = {"w": jnp.ones((4, 3))}
    tap = init_tap(params)
    row = jnp.zeros(len(ROW), jnp.float32)

    def steps(first: int, n: int) -> None:
        nonlocal tap
        for i in range(first, first + n):
            due = jnp.asarray(i % 3 == 0)  # some steps keep the arrays, some do not
            tap = tap_update(tap, tap_steps(tap, jnp.asarray(i)), row, params, params, due)

    steps(0, 3)  # each op compiled once, for these shapes
    warmed = len(compiles)
    steps(3, 20)
    assert len(compiles) == warmed, f"{len(compiles) - warmed} compiles in 20 eager steps"
    assert int(np.asarray(tap.ring)[-1, 1]) == 23  # the tap counted every update
