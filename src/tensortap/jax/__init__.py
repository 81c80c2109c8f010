"""tensortap for JAX, Flax and Optax: :class:`Hook` saves pytrees (names from their paths) and
JAX arrays, with statistics computed on the device; :func:`record` is an Optax transformation
that saves statistics of gradients or updates from inside a jitted step.

Its names load at first use (the hook imports JAX, which takes seconds), as the other faces'.
"""

from typing import TYPE_CHECKING

from tensortap._faces import face

if TYPE_CHECKING:
    from tensortap._shared import ReductionConfig, SaveConfig, create_trial, modes  # noqa: F401
    from tensortap.jax.hook import Hook, get_hook  # noqa: F401
    from tensortap.jax.names import path_name  # noqa: F401
    from tensortap.jax.record import record  # noqa: F401

__all__, __getattr__, __dir__ = face(__name__)
