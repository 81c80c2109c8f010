"""``record(hook, via="state")``: statistics carried out of the jitted step in the optimizer
state, with no host callback in the compiled graph.

A host callback anywhere in a compiled step, even in a ``lax.cond`` branch that is not taken,
costs a fixed share of every step (about 1 ms of a 5 ms jitted CPU step, see
docs/benchmarks.md). Here the step only computes the collection's statistics on due steps (a
``lax.cond``) into the optimizer state, and :meth:`tensortap.jax.Hook.end_step` reads them on
the host, only on steps the schedule makes due: on other steps nothing is transferred and
nothing waits.

::

    optimizer = optax.chain(ttj.record(hook, via="state"), optax.adam(1e-3))
    for batch in data:
        params, opt_state, loss = train_step(params, opt_state, batch)   # jitted
        hook.save_scalar("loss", loss, "losses")
        hook.end_step(opt_state)            # statistics of this step, then the next step
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from tensortap.core._modes import ModeKeys
from tensortap.exceptions import InvalidConfigError
from tensortap.jax._names import Leaf, path_name
from tensortap.jax._schedule import due_in_graph
from tensortap.jax._stats import statistics
from tensortap.jax._tap_host import Carried

if TYPE_CHECKING:
    from tensortap.jax._tap_host import JaxTapHost

logger = logging.getLogger(__name__)


class CarriedState(NamedTuple):
    """The optimizer state of ``record(hook, via="state")``."""

    steps: jax.Array  # optimizer steps taken
    stats: jax.Array  # float32 (leaves, statistics) of the last step if it was due, else zeros
    tag: jax.Array  # which of the hook's carried recordings this is


def carried_record(hook: JaxTapHost, prefix: str, collection: str) -> optax.GradientTransformation:
    """See the module docstring; ``record(..., via="state")`` builds this."""
    _specs(hook, collection)  # refuse a raw config now, not at the first step
    entry: list[Carried] = []  # filled by init, when the leaves are known

    def init(params: Any) -> CarriedState:
        hook.guard_event(hook.note_initial, params)  # the weights before the first update
        leaves, _ = jax.tree_util.tree_flatten_with_path(params)
        specs = _specs(hook, collection)
        meta = tuple(
            Leaf(path_name(prefix, path), leaf.dtype, tuple(leaf.shape)) for path, leaf in leaves
        )
        if not entry:
            entry.append(Carried(collection, meta, specs))
        tag = hook.carry(entry[0])
        return CarriedState(
            jnp.zeros([], jnp.int32),
            jnp.zeros((len(meta), len(specs)), jnp.float32),
            jnp.asarray(tag, jnp.int32),
        )

    def update(updates: Any, state: CarriedState, params: Any = None) -> tuple[Any, CarriedState]:
        if not entry:
            raise InvalidConfigError("record(hook, via='state'): update before init")
        specs = entry[0].specs
        arrays = jax.tree_util.tree_leaves(updates)
        schedule = hook.save_config_of(collection).get_save_config(ModeKeys.TRAIN)
        if specs and arrays:
            stats = jax.lax.cond(
                due_in_graph(schedule, state.steps),
                lambda xs: jnp.stack([statistics(a, specs) for a in xs]),
                lambda xs: jnp.zeros_like(state.stats),
                arrays,
            )
        else:
            stats = state.stats
        return updates, CarriedState(state.steps + 1, stats, state.tag)

    return optax.GradientTransformation(init, update)


def _specs(hook: JaxTapHost, collection: str) -> tuple[tuple[str, bool], ...]:
    """The statistics to carry: the collection's, none if it is not saved at all."""
    if not hook.is_collection_included(collection):
        return ()
    config = hook.reduction_config_of(collection)
    if config.saves_raw:
        raise InvalidConfigError(
            f"record(hook, via='state') carries statistics in the optimizer state, but the "
            f"{collection!r} collection's reduction config asks for raw values; give it "
            "reductions or norms (ReductionConfig(norms=['l2'])), or use via='callback' for "
            "raw values"
        )
    return tuple(config.reduction_specs)


def carried_states(opt_state: Any) -> list[CarriedState]:
    """The :class:`CarriedState` nodes of an optimizer state, in tree order."""
    nodes = jax.tree_util.tree_leaves(opt_state, is_leaf=lambda x: isinstance(x, CarriedState))
    return [n for n in nodes if isinstance(n, CarriedState)]
