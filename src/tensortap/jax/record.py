"""``record(hook)``: an Optax transformation that saves the statistics of what flows through it
(the gradients, placed first in a chain; the updates, placed last), from inside a jitted step.

::

    optimizer = optax.chain(tensortap.jax.record(hook), optax.adam(1e-3))

The statistics asked for by the collection's reduction config (``gradients`` by default) are
computed in the compiled step, on the device, and reach the host through
``jax.debug.callback`` only on steps the collection's save schedule makes due (a ``lax.cond``
in the graph); raw values likewise, if the config asks for them. Every step, the optimizer's step
count is sent too, and the hook's TRAIN step follows it, so that a loss saved after the step
(``hook.save_scalar("loss", loss, "losses")``) lands in the same step. Do not call
``hook.next_step()`` as well.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from tensortap.core.collections import CollectionKeys
from tensortap.core.modes import ModeKeys
from tensortap.core.save_config import SaveConfigMode
from tensortap.jax.hook import Hook, Leaf
from tensortap.jax.names import path_name
from tensortap.jax.stats import statistics


class RecordState(NamedTuple):
    steps: jax.Array  # optimizer steps taken


def record(
    hook: Hook, prefix: str = "gradient", collection: str = CollectionKeys.GRADIENTS
) -> optax.GradientTransformation:
    """Save statistics of the updates flowing through this point of an Optax chain under
    ``<prefix>/<path>`` (``gradient/params/Dense_0/kernel``), per ``collection``'s reduction
    config and save schedule. The updates pass through unchanged."""

    def init(params: Any) -> RecordState:
        return RecordState(jnp.zeros([], jnp.int32))

    def update(updates: Any, state: RecordState, params: Any = None) -> tuple[Any, RecordState]:
        leaves, _ = jax.tree_util.tree_flatten_with_path(updates)
        meta = tuple(
            Leaf(path_name(prefix, path), leaf.dtype, tuple(leaf.shape)) for path, leaf in leaves
        )
        arrays = [leaf for _, leaf in leaves]
        config = hook.reduction_config_of(collection)
        specs = config.reduction_specs
        schedule = hook.save_config_of(collection).get_save_config(ModeKeys.TRAIN)
        count = state.steps
        jax.debug.callback(functools.partial(_step, hook), count, ordered=True)

        def send(arrays: list[Any]) -> None:
            if config.saves_raw:
                deliver = functools.partial(hook._deliver, meta=meta, specs=specs)
                jax.debug.callback(lambda c, xs: deliver(c, leaves=xs), count, arrays, ordered=True)
            elif specs:
                stats = jnp.stack([statistics(a, specs) for a in arrays])
                deliver = functools.partial(hook._deliver, meta=meta, specs=specs)
                jax.debug.callback(lambda c, s: deliver(c, stats=s), count, stats, ordered=True)

        jax.lax.cond(_due(schedule, count), send, lambda arrays: None, arrays)
        return updates, RecordState(count + 1)

    return optax.GradientTransformation(init, update)


def _step(hook: Hook, count: Any) -> None:
    hook._deliver(int(count), (), ())


def _due(schedule: SaveConfigMode, step: jax.Array) -> jax.Array:
    """``schedule.should_save(step)``, in the graph."""
    due = (
        jnp.isin(step, jnp.asarray(schedule.save_steps, jnp.int32))
        if schedule.save_steps
        else jnp.bool_(False)
    )
    if schedule.save_interval is not None:
        in_range = step >= schedule.start_step
        if schedule.end_step is not None:
            in_range = in_range & (step < schedule.end_step)
        due = due | (in_range & (step % schedule.save_interval == 0))
    return due
