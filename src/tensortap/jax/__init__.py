"""tensortap for JAX, Flax and Optax: :class:`Hook` saves pytrees (names from their paths) and
JAX arrays, with statistics computed on the device; :func:`record` is an Optax transformation
that saves statistics of gradients or updates from inside a jitted step."""

from typing import TYPE_CHECKING, Any

from tensortap import ReductionConfig, SaveConfig, create_trial, modes

if TYPE_CHECKING:
    from tensortap.jax.hook import Hook, get_hook
    from tensortap.jax.names import path_name
    from tensortap.jax.record import record

# The hook imports JAX (seconds): it loads at first use, so that zero-code-change support
# (tensortap.jax.zcc, imported by every attached script) costs nothing to scripts that never
# use JAX.
_LAZY = {
    "Hook": "tensortap.jax.hook",
    "get_hook": "tensortap.jax.hook",
    "path_name": "tensortap.jax.names",
    "record": "tensortap.jax.record",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tensortap.jax' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "Hook",
    "ReductionConfig",
    "SaveConfig",
    "create_trial",
    "get_hook",
    "modes",
    "path_name",
    "record",
]
