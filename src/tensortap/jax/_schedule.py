"""A collection's save schedule, evaluated inside a compiled step."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from tensortap.core._save_config import SaveConfigMode


def due_in_graph(schedule: SaveConfigMode, step: jax.Array) -> jax.Array:
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
