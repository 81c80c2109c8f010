"""Numerics statistics for low precision, as reductions any collection can ask for
(``ReductionConfig(reductions=["amax", "dynamic_range", "underflow_bf16", "nonfinite"])``).

Names follow NVIDIA TransformerEngine's debug statistics where it has them (``amax``,
``dynamic_range``, underflows and overflows as shares):

- ``amax``: the largest finite ``|x|`` (0 for a tensor with none);
- ``dynamic_range``: ``log2(amax) - log2(smallest non-zero finite |x|)``, in binades (0 when
  no finite value is non-zero);
- ``nonfinite``: how many values are NaN or infinite;
- ``underflow_<format>``: the share of values that are non-zero but below the format's
  smallest normal number (they become subnormal, losing precision, or flush to zero);
- ``overflow_<format>``: the share of finite values above the format's largest number (they
  become inf, or saturate in float8).

Formats: ``bf16``, ``fp16``, ``fp8_e4m3`` (OCP E4M3FN) and ``fp8_e5m2``. bfloat16 shares
float32's exponent range, so it has no overflow statistic of its own. NumPy only; the PyTorch
hook computes the same on the device (``tensortap.pytorch._convert``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np


class Format(NamedTuple):
    smallest_normal: float
    largest: float


FORMATS: dict[str, Format] = {
    "bf16": Format(2.0**-126, 3.3895313892515355e38),
    "fp16": Format(2.0**-14, 65504.0),
    "fp8_e4m3": Format(2.0**-6, 448.0),
    "fp8_e5m2": Format(2.0**-14, 57344.0),
}

NUMERICS_REDUCTIONS: tuple[str, ...] = (
    "amax",
    "dynamic_range",
    "nonfinite",
    *(f"underflow_{f}" for f in FORMATS),
    *(f"overflow_{f}" for f in FORMATS if f != "bf16"),
)


def numerics(x: np.ndarray[Any, Any], name: str) -> float:
    """One numerics statistic of ``x`` (float64 or wider), as a Python float."""
    finite = np.isfinite(x)
    if name == "nonfinite":
        return float(x.size - int(np.count_nonzero(finite)))
    magnitude = np.abs(x[finite])
    if name == "amax":
        return float(magnitude.max()) if magnitude.size else 0.0
    if name == "dynamic_range":
        nonzero = magnitude[magnitude > 0]
        if not nonzero.size:
            return 0.0
        return float(np.log2(nonzero.max()) - np.log2(nonzero.min()))
    kind, _, fmt = name.partition("_")
    limits = FORMATS[fmt]
    if not x.size:
        return 0.0
    if kind == "underflow":
        count = np.count_nonzero((magnitude > 0) & (magnitude < limits.smallest_normal))
    else:
        count = np.count_nonzero(magnitude > limits.largest)
    return float(count) / x.size


__all__ = ["FORMATS", "NUMERICS_REDUCTIONS", "Format", "numerics"]
