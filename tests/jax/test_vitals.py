"""Vital signs through ``tensortap.jax.record(hook)`` in a jitted Optax loop: every step's loss
(saved by the loop) and gradient norm, whatever the hook's save interval."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
optax = pytest.importorskip("optax")
import jax.numpy as jnp  # noqa: E402

import tensortap as tt  # noqa: E402
import tensortap.jax as ttj  # noqa: E402


def test_record_saves_every_steps_loss_and_gradient_norm(tmp_path: Path) -> None:
    hook = ttj.Hook(
        tmp_path,
        save_config=ttj.SaveConfig(save_interval=10),
        include_collections=["losses", "gradients"],
    )
    optimizer = optax.chain(ttj.record(hook), optax.adam(1e-2))
    params = {"w": jax.random.normal(jax.random.PRNGKey(0), (8, 3)), "b": jnp.zeros(3)}
    state = optimizer.init(params)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(64, 8)), jnp.float32)
    y = jnp.asarray(rng.normal(size=(64, 3)), jnp.float32)

    @jax.jit
    def step(p, s):
        loss, grads = jax.value_and_grad(lambda q: jnp.mean((x @ q["w"] + q["b"] - y) ** 2))(p)
        updates, s = optimizer.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss, optax.tree.norm(grads)

    own = []
    for _ in range(25):
        params, state, loss, norm = step(params, state)
        hook.save_scalar("loss", loss, "losses")
        own.append((float(loss), float(norm)))
    hook.close()
    trial = tt.create_trial(tmp_path)
    train = tt.modes.TRAIN
    assert trial.tensor("loss").steps(mode=train) == [0, 10, 20]
    for name, column in (("vitals/loss", 0), ("vitals/grad_norm", 1)):
        tensor = trial.tensor(name)
        assert tensor.steps(mode=train) == list(range(25))
        got = [float(tensor.value(s, mode=train)) for s in range(25)]
        np.testing.assert_allclose(got, [v[column] for v in own], rtol=1e-5)
