"""A JAX/Optax loop rolls back: the Optax guard's skip budget asks :class:`Rollback` (the
framework-free one, through the user's own save and load functions) to restore the last good
checkpoint and leave the bad batches out; training then ends where a run that never saw those
batches ends. No torch is imported on the way."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
optax = pytest.importorskip("optax")
import jax.numpy as jnp  # noqa: E402

import tensortap.jax as ttj  # noqa: E402
from tests.jax.test_guard import batches, bits, init_params, loss_fn  # noqa: E402

BAD = (33, 34, 35)  # a run of corrupt batches: the budget (2 skips in 5 steps) runs out


def corrupt(data: list[Any]) -> list[Any]:
    out = list(data)
    for at in BAD:
        x, y = out[at]
        bad = x.copy()
        bad[0, 0] = np.nan
        out[at] = (bad, y)
    return out


def run(data: list[Any], total: int, budget: Any = None) -> tuple[Any, Any, Any]:
    """``total`` steps of an Optax loop driven by ``Rollback.steps``; checkpoints every 10
    steps are kept in memory (JAX arrays are immutable: keeping them is a copy)."""
    state: dict[str, Any] = {}
    saved: dict[int, Any] = {}

    def save(step: int) -> None:
        saved[step] = (state["params"], state["opt"])

    def load(step: int) -> None:
        state["params"], state["opt"] = saved[step]

    rollback = ttj.Rollback(
        ttj.FunctionCheckpoints(save, load), batches=ttj.SkipBatches(data), every=10
    )
    guard = ttj.Guard(optax.adam(1e-2), budget=budget, rollback=rollback if budget else None)
    state["params"] = init_params()
    state["opt"] = guard.init(state["params"])

    @jax.jit
    def step(params: Any, opt: Any, x: Any, y: Any) -> tuple[Any, Any]:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt = guard.update(grads, opt, params, value=loss)
        return optax.apply_updates(params, updates), opt

    for _, _, (x, y) in rollback.steps(total):
        state["params"], state["opt"] = step(state["params"], state["opt"], x, y)
        guard.read(state["opt"])
    return state["params"], guard, rollback


def test_an_optax_loop_rolls_back_and_leaves_the_bad_batches_out() -> None:
    clean = batches(80)
    params, guard, rollback = run(corrupt(clean), 60, ttj.SkipBudget(2, 5, then="rollback"))
    assert rollback.rollbacks == 1
    (event,) = rollback.events
    assert event.restored_step == 30  # the last checkpoint before the first bad step
    assert set(rollback.batches.skip) == set(BAD[:2])  # the batches the budget spent on
    assert all(bool(jnp.isfinite(v).all()) for v in jax.tree_util.tree_leaves(params))
    # after the restore, step 33 trains the third bad batch (35): the guard skips it, within
    # its budget (steps are the loop's: the restored optimizer state counts from step 30)
    assert [e.step for e in guard.events] == [33, 34, 33] and guard.skipped == 3
    # what the rollback made of it: the run that trained the same batches without the bad ones
    kept = [b for i, b in enumerate(clean[:62]) if i not in BAD]
    again, _, _ = run(kept, 59)
    assert bits(params) == bits(again)


def test_the_rollback_imports_no_torch() -> None:
    code = (
        "import sys, tensortap.jax as t; t.Rollback; t.FunctionCheckpoints; t.SkipBatches;"
        "import tensortap.healing; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
