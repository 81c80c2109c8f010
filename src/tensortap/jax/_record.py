"""``record(hook)``: an Optax transformation that saves the statistics of what flows through it
(the gradients, placed first in a chain; the updates, placed last), from inside a jitted step.

::

    optimizer = optax.chain(tensortap.jax.record(hook), optax.adam(1e-3))

The statistics asked for by the collection's reduction config (``gradients`` by default) are
computed in the compiled step, on the device, and reach the host through
``jax.debug.callback`` only on steps the collection's save schedule makes due (a ``lax.cond``
in the graph); raw values likewise, if the config asks for them. Every step, the optimizer's step
count is sent too, with the total L2 norm of what flows through (``vitals/grad_norm``; placed
last with ``prefix="update"``, ``vitals/update_norm``), and the hook's TRAIN step follows it,
so that a loss saved after the step (``hook.save_scalar("loss", loss, "losses")``, also
``vitals/loss``) lands in the same step. Do not call ``hook.next_step()`` as well.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from tensortap.core._collections import CollectionKeys
from tensortap.core._modes import ModeKeys
from tensortap.core._vitals import Vital
from tensortap.exceptions import InvalidConfigError
from tensortap.jax._carried import carried_record
from tensortap.jax._names import Leaf, path_name
from tensortap.jax._schedule import due_in_graph
from tensortap.jax._stats import statistics
from tensortap.jax._tap_host import JaxTapHost


class RecordState(NamedTuple):
    steps: jax.Array  # optimizer steps taken


def record(
    hook: JaxTapHost,
    prefix: str = "gradient",
    collection: str = CollectionKeys.GRADIENTS,
    via: str = "callback",
) -> optax.GradientTransformation:
    """Save statistics of the updates flowing through this point of an Optax chain under
    ``<prefix>/<path>`` (``gradient/params/Dense_0/kernel``), per ``collection``'s reduction
    config and save schedule. The updates pass through unchanged.

    ``via="callback"`` (the default) sends them to the host from the compiled step; nothing else
    changes in the loop. ``via="state"`` carries them out in the optimizer state, with no host
    callback in the graph (cheaper: see :mod:`tensortap.jax._carried`); the loop then calls
    ``hook.end_step(opt_state)`` once per step."""
    if via == "state":
        return carried_record(hook, prefix, collection)
    if via != "callback":
        raise InvalidConfigError(f"record(via=...) must be 'callback' or 'state', got {via!r}")

    def init(params: Any) -> RecordState:
        hook.guard_event(hook.note_initial, params)  # the weights before the first update
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
        # the total L2 norm of what flows through, every step: a vital sign (grad_norm first
        # in a chain, update_norm last)
        vital = Vital.UPDATE_NORM if prefix.startswith("update") else Vital.GRAD_NORM
        norm = _global_norm(arrays)
        jax.debug.callback(functools.partial(_step, hook, vital), count, norm, ordered=True)

        def send(arrays: list[Any]) -> None:
            if config.saves_raw:
                deliver = functools.partial(hook.deliver, meta=meta, specs=specs)
                jax.debug.callback(lambda c, xs: deliver(c, leaves=xs), count, arrays, ordered=True)
            elif specs:
                stats = jnp.stack([statistics(a, specs) for a in arrays])
                deliver = functools.partial(hook.deliver, meta=meta, specs=specs)
                jax.debug.callback(lambda c, s: deliver(c, stats=s), count, stats, ordered=True)

        jax.lax.cond(due_in_graph(schedule, count), send, lambda arrays: None, arrays)
        return updates, RecordState(count + 1)

    return optax.GradientTransformation(init, update)


def _step(hook: JaxTapHost, vital: str, count: Any, norm: Any) -> None:
    hook.deliver(int(count), (), ())
    hook.save_vitals({vital: float(norm)})


def _global_norm(arrays: list[Any]) -> Any:
    """In the graph: the L2 norm of all the floating ``arrays`` together (float32)."""
    floats = [a for a in arrays if jnp.issubdtype(a.dtype, jnp.inexact)]
    if not floats:
        return jnp.float32(jnp.nan)
    return jnp.sqrt(sum(jnp.sum(jnp.square(jnp.abs(a).astype(jnp.float32))) for a in floats))
