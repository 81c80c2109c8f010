"""Moved to :mod:`tensortap.attach.jax` (zero code change lives in one package); this name
stays for code that imports it."""

from tensortap.attach.jax import enable, stop_in_callback

__all__ = ["enable", "stop_in_callback"]
