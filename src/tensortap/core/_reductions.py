"""Reductions and norms of NumPy arrays, as saved by hooks and computed by trials on demand.

All results are Python floats computed in float64. Complex tensors are reduced on their
magnitude. Reductions of an empty tensor: min/max/mean/std/variance are NaN, sum/l1/l2 are 0,
prod is 1. NaN and inf propagate (that is what exploding-tensor rules look for).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensortap.core._numerics import NUMERICS_REDUCTIONS, numerics
from tensortap.core._reduction_config import ALLOWED_NORMS, ALLOWED_REDUCTIONS
from tensortap.exceptions import InvalidConfigError

# The order is the format's reduction codes (index.py): new names only ever go at the end.
REDUCTION_NAMES = ALLOWED_REDUCTIONS + ALLOWED_NORMS + NUMERICS_REDUCTIONS


def _prepare(array: np.ndarray[Any, Any], on_abs: bool) -> np.ndarray[Any, Any]:
    out: np.ndarray[Any, Any] = array
    if out.dtype.kind == "c":
        out = np.abs(out)
    elif out.dtype.kind != "f" or out.dtype.itemsize < 4:
        out = out.astype(np.float64)
    if on_abs:
        out = np.abs(out)
    return out


def compute_reduction(array: np.ndarray[Any, Any], name: str, on_abs: bool = False) -> float:
    """One reduction or norm of ``array`` (see the module docstring for edge cases)."""
    if name not in REDUCTION_NAMES:
        raise InvalidConfigError(
            f"unknown reduction {name!r}; accepted: {', '.join(REDUCTION_NAMES)}"
        )
    x = _prepare(np.asarray(array), on_abs)
    if name in NUMERICS_REDUCTIONS:
        return numerics(x.astype(np.float64, copy=False), name)
    if x.size == 0:
        return {"sum": 0.0, "prod": 1.0, "l1": 0.0, "l2": 0.0}.get(name, float("nan"))
    with np.errstate(all="ignore"):
        if name == "min":
            return float(np.min(x))
        if name == "max":
            return float(np.max(x))
        if name == "mean":
            return float(np.mean(x, dtype=np.float64))
        if name == "std":
            return float(np.std(x, dtype=np.float64))
        if name == "variance":
            return float(np.var(x, dtype=np.float64))
        if name == "sum":
            return float(np.sum(x, dtype=np.float64))
        if name == "prod":
            return float(np.prod(x, dtype=np.float64))
        flat = x.reshape(-1).astype(np.float64, copy=False)
        if name == "l1":
            return float(np.sum(np.abs(flat)))
        return float(np.sqrt(np.dot(flat, flat)))
