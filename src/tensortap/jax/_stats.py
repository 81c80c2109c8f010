"""Reductions, norms and numerics statistics of a JAX array, computed with ``jax.numpy`` where
the array lives (also inside ``jit``), with the core's meanings (``tensortap.core._reductions``,
``tensortap.core._numerics``): population ``std``/``variance``, low-precision floats reduced as
float32, integers as float32, ``amax`` and the shares over finite values only."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from tensortap.core._numerics import FORMATS

Spec = tuple[str, bool]


def statistics(x: Any, specs: tuple[Spec, ...]) -> Any:
    """A 1-D float32 array: the statistics ``specs`` of ``x``, in order."""
    x = jnp.asarray(x)
    if jnp.iscomplexobj(x):
        x = jnp.abs(x)
    x = (
        x.astype(jnp.float32)
        if x.dtype.itemsize < 4 or not jnp.issubdtype(x.dtype, jnp.floating)
        else x
    )
    return jnp.stack([_one(x, name, on_abs) for name, on_abs in specs]).astype(jnp.float32)


def _one(x: Any, name: str, on_abs: bool) -> Any:
    if x.size == 0:
        return jnp.asarray({"sum": 0.0, "prod": 1.0, "l1": 0.0, "l2": 0.0}.get(name, jnp.nan))
    v = jnp.abs(x) if on_abs else x
    if name == "min":
        return v.min()
    if name == "max":
        return v.max()
    if name == "mean":
        return v.mean()
    if name == "std":
        return v.std()
    if name == "variance":
        return v.var()
    if name == "sum":
        return v.sum()
    if name == "prod":  # a zero among finite values: 0, even if the rest overflow float32
        exact_zero = jnp.any(v == 0) & jnp.all(jnp.isfinite(v))
        return jnp.where(exact_zero, 0.0, v.prod())
    if name == "l1":
        return jnp.abs(x).sum()
    if name == "l2":  # scaled by the largest magnitude, so tiny values do not square to 0
        m = jnp.max(jnp.abs(x))
        ok = (m > 0) & jnp.isfinite(m)
        scale = jnp.where(ok, m, 1.0)
        scaled = scale * jnp.sqrt(jnp.sum(jnp.square(x / scale)))
        return jnp.where(ok, scaled, jnp.sqrt(jnp.sum(jnp.square(x))))
    finite = jnp.isfinite(x)
    if name == "nonfinite":
        return jnp.sum(~finite).astype(jnp.float32)
    magnitude = jnp.where(finite, jnp.abs(x), 0.0)
    top = magnitude.max()
    if name == "amax":
        return top
    if name == "dynamic_range":
        bottom = jnp.where(magnitude > 0, magnitude, jnp.inf).min()
        # top == bottom: exactly 0 (XLA's two log2 of one value may differ in the last bit)
        spread = jnp.where(top > bottom, jnp.log2(top) - jnp.log2(bottom), 0.0)
        return jnp.where(top > 0, spread, 0.0)
    kind, _, fmt = name.partition("_")
    limits = FORMATS[fmt]
    if kind == "underflow":
        hit = (magnitude > 0) & (magnitude < limits.smallest_normal)
    else:
        hit = magnitude > limits.largest
    return jnp.sum(hit) / x.size
