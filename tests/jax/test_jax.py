"""JAX, Flax and Optax on the CPU: pytrees saved under names from their paths, statistics
computed on the device equal to the core's, the Optax ``record`` transformation saving gradient
statistics (or raw gradients) from inside a jitted step on its save schedule with the TRAIN step
following the optimizer's count, and a Flax example that the built-in rules judge."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

jax = pytest.importorskip("jax")
optax = pytest.importorskip("optax")
import jax.numpy as jnp  # noqa: E402

import tensortap as tt  # noqa: E402
import tensortap.jax as ttj  # noqa: E402
from tensortap.core._numerics import NUMERICS_REDUCTIONS  # noqa: E402
from tensortap.core._reduction_config import ALLOWED_NORMS, ALLOWED_REDUCTIONS  # noqa: E402
from tensortap.core._reductions import compute_reduction  # noqa: E402
from tensortap.exceptions import InvalidConfigError  # noqa: E402
from tensortap.jax._stats import statistics  # noqa: E402

EXAMPLES = Path(__file__).parents[2] / "examples"
SPECS = (
    *((n, False) for n in ALLOWED_REDUCTIONS + ALLOWED_NORMS + NUMERICS_REDUCTIONS),
    *((n, True) for n in ALLOWED_REDUCTIONS),
)
VALUES = st.one_of(
    # Statistics are float32 on the device (JAX's default): magnitudes whose squares leave
    # float32's normal range (and subnormals, which XLA flushes to zero) are not drawn.
    st.floats(-100, 100, width=32).filter(lambda v: v == 0 or abs(v) >= 1e-15),
    st.sampled_from([0.0, 1e-6, -2.5, 500.0, float("nan"), float("inf")]),
)


@settings(max_examples=100, deadline=None)
@given(hnp.arrays(np.float32, st.integers(1, 30), elements=VALUES))
def test_device_statistics_equal_the_cores(values: np.ndarray) -> None:
    got = np.asarray(jax.jit(statistics, static_argnums=1)(jnp.asarray(values), SPECS))
    whole = values.astype(np.float64)
    finite = np.abs(whole[np.isfinite(whole)])
    scale = float(finite.max()) if finite.size else 0.0
    for (name, on_abs), value in zip(SPECS, got, strict=True):
        want = compute_reduction(whole, name, on_abs)
        if np.isnan(want):
            assert np.isnan(value), (name, on_abs, value)
        elif name == "prod":  # float32 on the device: a product beyond its range is inf there
            if abs(want) < 1e30:
                assert value == pytest.approx(want, rel=1e-4), name
        else:
            slack = 1e-5 * scale ** (2 if name == "variance" else 1)
            assert value == pytest.approx(want, rel=1e-4, abs=slack + 1e-30), (name, on_abs)


def test_pytrees_are_named_from_their_paths(tmp_path: Path) -> None:
    hook = ttj.Hook(tmp_path, include_collections=["weights", "biases", "default", "norms"])
    norms = hook.get_collection("norms")
    norms.include("^stats/")
    norms.reduction_config = ttj.ReductionConfig(norms=["l2"], reductions=["max"])
    variables = {
        "params": {
            "Dense_0": {"kernel": jnp.ones((3, 2)), "bias": jnp.zeros(2)},
            "blocks": [jnp.full((2,), 2.0, jnp.bfloat16)],
        }
    }
    assert hook.save_pytree(variables) == 3
    assert hook.save_pytree({"a": jnp.arange(4.0)}, "stats", collections="norms") == 1
    hook.close()
    trial = tt.create_trial(tmp_path)
    assert sorted(trial.tensor_names()) == [
        "params/Dense_0/bias",
        "params/Dense_0/kernel",
        "params/blocks/0",
        "stats/a",
    ]
    assert trial.tensor_names(collection="biases") == ["params/Dense_0/bias"]
    np.testing.assert_array_equal(trial.tensor("params/Dense_0/kernel").value(0), np.ones((3, 2)))
    assert trial.tensor("params/blocks/0").value(0).tolist() == [2.0, 2.0]  # bfloat16 kept
    stats = trial.tensor("stats/a")
    assert stats.reduction_value(0, "l2") == pytest.approx(np.sqrt(14.0))
    assert stats.reduction_value(0, "max") == 3.0


def _loss(params, x, y):
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def _train(
    hook: ttj.Hook, steps: int, prefix: str = "gradient/params", via: str = "callback"
) -> list[dict]:
    params = {"w": jnp.full((4, 3), 0.1), "b": jnp.zeros(3)}
    opt = optax.chain(ttj.record(hook, prefix=prefix, via=via), optax.sgd(0.05))
    state = opt.init(params)

    @jax.jit
    def step(params, state, x, y):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss, grads

    key = jax.random.PRNGKey(0)
    grads_seen = []
    for _ in range(steps):
        key, kx = jax.random.split(key)
        x = jax.random.normal(kx, (8, 4))
        params, state, loss, grads = step(params, state, x, x[:, :3] * 2.0)
        grads_seen.append(jax.device_get(grads))
        hook.save_scalar("loss", loss, "losses")
        hook.save_pytree(params, "params")
        if via == "state":
            hook.end_step(state)
    hook.close()
    return grads_seen


@pytest.mark.parametrize("via", ["callback", "state"])
def test_record_saves_gradient_statistics_from_inside_jit_on_schedule(
    tmp_path: Path, via: str
) -> None:
    hook = ttj.Hook(
        tmp_path,
        save_config=ttj.SaveConfig(save_interval=3),
        include_collections=["gradients", "losses", "weights"],
    )
    hook.get_collection("gradients").reduction_config = ttj.ReductionConfig(
        reductions=["min", "max", "mean"], norms=["l2"], abs_reductions=["max"]
    )
    hook.get_collection("losses").save_config = ttj.SaveConfig(save_interval=1)
    grads = _train(hook, 7, via=via)
    trial = tt.create_trial(tmp_path)
    w = trial.tensor("gradient/params/w")
    assert w.steps() == [0, 3, 6]  # the collection's schedule, evaluated in the graph
    for step in w.steps():
        g = np.asarray(grads[step]["w"], np.float64)
        assert w.reduction_value(step, "l2") == pytest.approx(np.linalg.norm(g), rel=1e-5)
        assert w.reduction_value(step, "min") == pytest.approx(g.min(), rel=1e-6)
        assert w.reduction_value(step, "max", abs=True) == pytest.approx(np.abs(g).max())
        assert w.reduction_value(step, "mean") == pytest.approx(g.mean(), rel=1e-5, abs=1e-7)
    # The TRAIN step follows the optimizer's count: the loss saved after step k is at step k.
    assert trial.tensor("loss").steps(mode=tt.modes.TRAIN) == list(range(7))
    assert trial.tensor("params/w").steps() == [0, 3, 6]
    assert trial.tensor_names(collection="gradients") == ["gradient/params/b", "gradient/params/w"]


def test_record_saves_raw_gradients_when_the_config_asks(tmp_path: Path) -> None:
    hook = ttj.Hook(
        tmp_path, save_config=ttj.SaveConfig(save_steps=[1, 2]), include_collections=["gradients"]
    )
    grads = _train(hook, 4)
    w = tt.create_trial(tmp_path).tensor("gradient/params/w")
    assert w.steps() == [1, 2]
    for step in (1, 2):
        np.testing.assert_allclose(w.value(step), grads[step]["w"], rtol=1e-6)


def test_record_via_state_puts_no_host_callback_in_the_compiled_step(tmp_path: Path) -> None:
    hook = ttj.Hook(tmp_path, include_collections=["gradients"])
    hook.get_collection("gradients").reduction_config = ttj.ReductionConfig(norms=["l2"])
    params = {"w": jnp.ones((4, 3))}
    for via, callbacks in (("state", False), ("callback", True)):
        opt = ttj.record(hook, via=via)
        state = opt.init(params)
        text = jax.jit(opt.update).lower(params, state).as_text()
        assert ("callback" in text) is callbacks, via
    hook.close()


def test_record_via_state_refuses_raw_values_and_end_step_a_foreign_state(
    tmp_path: Path,
) -> None:
    hook = ttj.Hook(tmp_path, include_collections=["gradients"])  # raw gradients by default
    with pytest.raises(InvalidConfigError, match="raw values"):
        ttj.record(hook, via="state")
    with pytest.raises(InvalidConfigError, match="'callback' or 'state'"):
        ttj.record(hook, via="host")
    with pytest.raises(InvalidConfigError, match="record\\(hook, via='state'\\)"):
        hook.end_step(optax.sgd(0.1).init({"w": jnp.ones(2)}))
    hook.close()


def test_end_step_out_of_line_with_the_optimizer_is_counted_not_raised(tmp_path: Path) -> None:
    hook = ttj.Hook(
        tmp_path, save_config=ttj.SaveConfig(save_interval=1), include_collections=["gradients"]
    )
    hook.get_collection("gradients").reduction_config = ttj.ReductionConfig(norms=["l2"])
    params = {"w": jnp.ones(3)}
    opt = ttj.record(hook, via="state")
    state = opt.init(params)
    update = jax.jit(opt.update)
    _, state = update(params, state)
    hook.end_step(state)  # step 0: saved
    hook.end_step(state)  # the same state again: the hook is at step 1, the state at step 0
    assert hook.status.internal_errors == 1
    assert "StepMismatchError" in (hook.status.last_internal_error or "")
    hook.close()
    w = tt.create_trial(tmp_path).tensor("gradient/w")
    assert w.steps() == [0]
    assert w.reduction_value(0, "l2") == pytest.approx(np.sqrt(3.0))


def test_end_step_follows_a_resumed_optimizers_count(tmp_path: Path) -> None:
    hook = ttj.Hook(
        tmp_path,
        save_config=ttj.SaveConfig(save_interval=2),
        include_collections=["gradients", "losses"],
    )
    hook.get_collection("gradients").reduction_config = ttj.ReductionConfig(norms=["l2"])
    hook.get_collection("losses").save_config = ttj.SaveConfig(save_interval=1)
    params = {"w": jnp.ones(3)}
    opt = ttj.record(hook, via="state")
    state = opt.init(params)._replace(steps=jnp.int32(6))  # restored from a checkpoint
    update = jax.jit(opt.update)
    for k in range(3):
        _, state = update(params, state)
        hook.save_scalar("loss", float(k), "losses")
        hook.end_step(state)
    hook.close()
    trial = tt.create_trial(tmp_path)
    assert trial.tensor("loss").steps(mode=tt.modes.TRAIN) == [6, 7, 8]
    assert trial.tensor("loss").value(6, mode=tt.modes.TRAIN) == 0.0
    assert trial.tensor("gradient/w").steps(mode=tt.modes.TRAIN) == [6, 8]


def test_the_flax_example_is_judged_by_the_rules(tmp_path: Path) -> None:
    pytest.importorskip("flax")
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "jax_flax.py"), "--quick"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    healthy, broken = result.stdout.split("learning rate far too high")
    assert "rules that found a problem: none" in healthy
    assert "LossNotDecreasing" in broken.split("rules that found a problem:")[1]


def _session(out: Path, via: str, restored: tuple | None, steps: int) -> tuple:
    """One writing session: a hook on ``out``, ``steps`` Optax steps from ``restored`` (the
    params and optimizer state a checkpoint gave back) or from scratch; what to checkpoint."""
    hook = ttj.Hook(
        out, save_config=ttj.SaveConfig(save_interval=5), include_collections=["gradients"]
    )
    hook.get_collection("gradients").reduction_config = ttj.ReductionConfig(norms=["l2"])
    opt = optax.chain(ttj.record(hook, via=via), optax.sgd(0.05))
    params = {"w": jnp.full((4, 3), 0.1), "b": jnp.zeros(3)}
    state = opt.init(params)
    if restored is not None:  # as a checkpoint library restores into the template
        params, state = jax.tree_util.tree_map(jnp.asarray, restored)

    @jax.jit
    def step(params, state, x):
        grads = jax.grad(_loss)(params, x, x[:, :3])
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, grads

    norms = {}
    for k in range(steps):
        x = jax.random.normal(jax.random.PRNGKey(k), (8, 4))
        params, state, grads = step(params, state, x)
        norms[k] = float(np.linalg.norm(np.asarray(grads["w"])))
        if via == "state":
            hook.end_step(state)
    hook.close()
    return jax.device_get((params, state)), norms


@pytest.mark.parametrize("via", ["callback", "state"])
def test_a_hook_recreated_with_a_restored_optimizer_continues_its_steps(
    tmp_path: Path, via: str
) -> None:
    checkpoint, first = _session(tmp_path, via, None, 20)
    _, second = _session(tmp_path, via, checkpoint, 20)  # the optimizer's count is 20
    trial = tt.create_trial(tmp_path)
    want = [0, 5, 10, 15, 20, 25, 30, 35]
    assert trial.steps(mode=tt.modes.TRAIN) == want
    assert trial.steps() == want  # the global steps too: nothing written over
    w = trial.tensor("gradient/w")
    for step in want:  # each session's values, at the optimizer's step numbers
        norm = first[step] if step < 20 else second[step - 20]
        assert w.reduction_value(step, "l2", mode=tt.modes.TRAIN) == pytest.approx(norm, rel=1e-5)
    assert [s.first_step for s in trial.sessions()] == [0, 20]
