"""tensortap for JAX, Flax and Optax: :class:`Hook` saves pytrees (names from their paths) and
JAX arrays, with statistics computed on the device; :func:`record` is an Optax transformation
that saves statistics of gradients or updates from inside a jitted step."""

from __future__ import annotations

from tensortap import ReductionConfig, SaveConfig, create_trial, modes
from tensortap.jax.hook import Hook
from tensortap.jax.names import path_name
from tensortap.jax.record import record

__all__ = ["Hook", "ReductionConfig", "SaveConfig", "create_trial", "modes", "path_name", "record"]
