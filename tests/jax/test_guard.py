"""tensortap.jax.Guard: an Optax loop under jit skips a NaN batch and a x1e6 batch on the
device, leaving parameters and optimizer state bit-equal to a run without those batches; a
healthy noisy run trips none; the events and the skip budget are read on the host."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
optax = pytest.importorskip("optax")
import jax.numpy as jnp  # noqa: E402

import tensortap.jax as ttj  # noqa: E402
from tensortap.exceptions import InvalidConfigError  # noqa: E402
from tensortap.healing import SkipBudget  # noqa: E402

NAN_STEP, SPIKE_STEP = 14, 27


def init_params() -> dict[str, Any]:
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    return {
        "w1": jax.random.normal(k1, (8, 16)) * 0.3,
        "b1": jnp.zeros(16),
        "w2": jax.random.normal(k2, (16, 1)) * 0.3,
    }


def loss_fn(params: dict[str, Any], x: Any, y: Any) -> Any:
    hidden = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((hidden @ params["w2"] - y) ** 2)


def batches(count: int, noise: float = 0.1, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        x = rng.normal(size=(32, 8)).astype("float32")
        y = (np.sin(x[:, :1]) + noise * rng.standard_normal((32, 1))).astype("float32")
        out.append((x, y))
    return out


def poisoned(clean: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """``clean`` with a NaN batch inserted at NAN_STEP and a x1e6 one at SPIKE_STEP."""
    out = list(clean)
    x, y = clean[0]
    bad_x = x.copy()
    bad_x[3, 2] = np.nan
    out.insert(NAN_STEP, (bad_x, y))
    out.insert(SPIKE_STEP, (x * 1e6, y * 1e6))
    return out


def train(guard: ttj.Guard, data: list[Any], keep: tuple[int, ...] = ()) -> tuple[Any, Any, dict]:
    """Run an Optax loop under jit; returns the final params and state, and the (params,
    state) before and after each step in ``keep``."""
    params = init_params()
    state = guard.init(params)

    @jax.jit
    def step(params: Any, state: Any, x: Any, y: Any) -> tuple[Any, Any]:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, state = guard.update(grads, state, params, value=loss)
        return optax.apply_updates(params, updates), state

    seen: dict[int, Any] = {}
    for index, (x, y) in enumerate(data):
        before = (params, state.inner)
        params, state = step(params, state, x, y)
        guard.read(state)
        if index in keep:
            seen[index] = (before, (params, state.inner))
    return params, state, seen


def bits(tree: Any) -> list[bytes]:
    return [np.asarray(leaf).tobytes() for leaf in jax.tree_util.tree_leaves(tree)]


def test_nan_and_spike_batches_are_skipped_bit_equal() -> None:
    """Both bad steps trip and are undone: params and Adam's state after each equal those
    before it, bit for bit; the whole run ends bit-equal to one without those batches."""
    clean = batches(40)
    guard = ttj.Guard(optax.adam(1e-2))
    params, state, seen = train(guard, poisoned(clean), keep=(NAN_STEP, SPIKE_STEP))
    assert [e.step for e in guard.events] == [NAN_STEP, SPIKE_STEP]
    assert "loss is nan" in guard.events[0].reason
    loss = guard.events[1].loss
    assert "spike" in guard.events[1].reason and loss is not None and loss > 1e6
    assert all(e.skipped for e in guard.events) and guard.skipped == 2
    for index in (NAN_STEP, SPIKE_STEP):
        before, after = seen[index]
        assert bits(after) == bits(before), f"step {index} changed the params or the state"
    reference = ttj.Guard(optax.adam(1e-2))
    clean_params, clean_state, _ = train(reference, clean)
    assert reference.events == []
    assert bits(params) == bits(clean_params)
    assert bits(state.inner) == bits(clean_state.inner)
    assert all(np.isfinite(np.asarray(v)).all() for v in jax.tree_util.tree_leaves(params))
    status = guard.status
    assert (status.steps, status.trips, status.skipped_updates) == (42, 2, 2)
    assert int(state.steps) == 42 and int(state.skipped) == 2


def test_skipped_first_step_keeps_negative_zeros() -> None:
    """A NaN first step (biases at -0.0, Adam's moments at 0) leaves every bit alone: the
    skipped update is -0.0, and p + -0.0 is p, -0.0 included."""
    guard = ttj.Guard(optax.adam(1e-2))
    params = {**init_params(), "b1": -jnp.zeros(16)}
    state = guard.init(params)
    x, y = batches(1)[0]
    x = x.copy()
    x[0, 0] = np.nan
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, after = jax.jit(guard.update)(grads, state, params, value=loss)
    assert bits(optax.apply_updates(params, updates)) == bits(params)
    assert bits(after.inner) == bits(state.inner) and int(after.skipped) == 1


def test_multisteps_accumulation_trips_only_the_nan_batch() -> None:
    """Around optax.MultiSteps (4 micro-batches per update), the micro-steps' zero updates are
    not judged: only the NaN batch trips, and its accumulator is put back."""
    data = batches(40)
    x, y = data[0]
    nan_x = x.copy()
    nan_x[1, 1] = np.nan
    data[21] = (nan_x, y)
    guard = ttj.Guard(optax.MultiSteps(optax.adam(1e-2), every_k_schedule=4))
    params, _state, seen = train(guard, data, keep=(21,))
    assert [e.step for e in guard.events] == [21]
    assert bits(seen[21][1]) == bits(seen[21][0])
    assert all(np.isfinite(np.asarray(v)).all() for v in jax.tree_util.tree_leaves(params))


def test_healthy_noisy_run_trips_none() -> None:
    """300 steps with noisy targets: the guard never trips."""
    guard = ttj.Guard(optax.adam(1e-2))
    _params, state, _ = train(guard, batches(300, noise=0.5, seed=1))
    assert guard.events == [] and int(state.trips) == 0 and guard.status.steps == 300


def test_chained_with_clipping_and_record_action() -> None:
    """Inside optax.chain (clipped gradients), read from the whole state; action="record"
    records the trip and leaves the update alone."""
    guard = ttj.Guard(optax.sgd(1e-2), action="record")
    tx = optax.chain(optax.clip_by_global_norm(1.0), guard.tx)
    params = init_params()
    state = tx.init(params)

    @jax.jit
    def step(params: Any, state: Any, x: Any, y: Any) -> tuple[Any, Any]:
        grads = jax.grad(loss_fn)(params, x, y)
        updates, state = tx.update(grads, state, params)  # no loss: not judged
        return optax.apply_updates(params, updates), state

    for x, y in poisoned(batches(30))[: NAN_STEP + 1]:
        params, state = step(params, state, x, y)
    guard.read(state)
    assert [(e.step, e.skipped, e.loss) for e in guard.events] == [(NAN_STEP, False, None)]
    assert "gradient norm is nan" in guard.events[0].reason
    assert not np.isfinite(np.asarray(params["w1"])).all()  # recorded, not undone


def test_skip_budget_stops_and_lost_trips_are_counted() -> None:
    """Two skips within 20 steps exhaust SkipBudget(2, 20): should_stop; trips beyond
    ``history`` between two reads are counted as lost."""
    data = batches(20)
    x, y = data[0]
    nan_x = x.copy()
    nan_x[0, 0] = np.nan
    data[12] = data[15] = (nan_x, y)
    guard = ttj.Guard(optax.adam(1e-2), budget=SkipBudget(skips=2, steps=20))
    train(guard, data)
    assert guard.should_stop and guard.status.budget_exhausted == 1
    few = ttj.Guard(optax.adam(1e-2), history=1)
    params = init_params()
    state = few.init(params)
    for x_, y_ in data:
        grads = jax.grad(loss_fn)(params, x_, y_)
        updates, state = few.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    few.read(state)
    assert [e.step for e in few.events] == [15] and few.status.lost == 1


def test_bad_input_is_refused() -> None:
    with pytest.raises(InvalidConfigError, match="GradientTransformation"):
        ttj.Guard("adam")
    with pytest.raises(InvalidConfigError, match="warmup must be <= window"):
        ttj.Guard(optax.adam(1e-3), window=5, warmup=10)
    guard = ttj.Guard(optax.adam(1e-3))
    with pytest.raises(InvalidConfigError, match="found 0"):
        guard.read({"not": jnp.zeros(2)})
