"""LowPrecisionRange: tensors whose values will not fit a low-precision format."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.core._numerics import FORMATS
from tensortap.exceptions import InvalidConfigError
from tensortap.rules._finding import Severity
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import (
    collection_names_param,
    fire_nonfinite,
    nonfinite_names,
    select,
)


class LowPrecisionRange(Rule):
    """Warns before ``dtype`` (``bf16``, ``fp16``, ``fp8_e4m3`` or ``fp8_e5m2``) overflow or
    underflow hurts a selected tensor:

    - overflow: its largest finite \\|x\\| (``amax``) is above the format's largest number
      divided by ``headroom`` (default 2: within one binade of overflowing);
    - underflow: more than ``underflow_share`` (default 0.05) of its values are non-zero but
      below the format's smallest normal number (they lose precision or flush to zero).

    Tensors: those of ``collection_names`` (default gradients) or matching ``tensor_regex``.
    Uses the saved ``amax``/``underflow_<dtype>`` reductions where the hook saved them, else
    computes them from the raw value. NaN or inf is a problem, as in every rule.
    """

    severity = Severity.WARNING

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        dtype, headroom = params["dtype"], params["headroom"]
        underflow_share = params["underflow_share"]
        if dtype not in FORMATS:
            raise InvalidConfigError(
                f"LowPrecisionRange: dtype must be one of {', '.join(FORMATS)}, got {dtype!r}"
            )
        if not headroom >= 1:
            raise InvalidConfigError(f"LowPrecisionRange: headroom must be >= 1, got {headroom!r}")
        if not 0 <= underflow_share <= 1:
            raise InvalidConfigError(
                f"LowPrecisionRange: underflow_share must be in 0..1, got {underflow_share!r}"
            )

    def __init__(
        self,
        base_trial: Any,
        dtype: str = "bf16",
        collection_names: list[str] | None = None,
        tensor_regex: list[str] | None = None,
        headroom: float = 2.0,
        underflow_share: float = 0.05,
    ) -> None:
        super().__init__(base_trial)
        self.dtype, self.headroom, self.underflow_share = dtype, headroom, underflow_share
        self.collection_names = collection_names or ["gradients"]
        self.tensor_regex = tensor_regex or []

    @classmethod
    def required_collections(cls, **params: Any) -> tuple[str, ...]:
        return tuple(collection_names_param(params)) or ("gradients",)

    def invoke_at_step(self, step: int) -> bool:
        names = select(self.base_trial, self.collection_names, self.tensor_regex, step=step)
        if not names:
            raise self.skip("none of the selected tensors was saved at this step")
        bad = nonfinite_names(self.base_trial, names, step)
        if bad:
            return fire_nonfinite(self, bad, "tensor")
        block = self.base_trial.step_block(step)
        limits = FORMATS[self.dtype]
        amax = block.reduce(names, "amax")
        under = block.reduce(names, f"underflow_{self.dtype}")
        ceiling = limits.largest / self.headroom
        over = np.flatnonzero(amax > ceiling).tolist()
        lost = np.flatnonzero(under > self.underflow_share).tolist()
        if not over and not lost:
            self.explain(
                f"{len(names)} tensors fit {self.dtype}: largest |x| {amax.max():.3g} (limit "
                f"{ceiling:.3g}), at most {under.max():.1%} below its smallest normal",
                value=float(amax.max()),
                threshold=ceiling,
            )
            return False
        # overflow first: it turns values into inf; underflow only loses precision
        values, hits, limit = (amax, over, ceiling) if over else (under, lost, self.underflow_share)
        worst = max(hits, key=lambda i: values[i])
        if over:
            what = (
                f"{names[worst]} reaches |x| {amax[worst]:.3g}, within {self.headroom:g}x of "
                f"{self.dtype}'s largest {limits.largest:.4g}: it will overflow"
            )
        else:
            what = (
                f"{under[worst]:.1%} of {names[worst]} is below {self.dtype}'s smallest normal "
                f"{limits.smallest_normal:.3g}: in {self.dtype} it loses precision or becomes 0"
            )
        more = f" ({len(hits) - 1} more tensors too)" if len(hits) > 1 else ""
        self.explain(
            what + more,
            tensors=[names[i] for i in hits],
            value=float(values[worst]),
            threshold=limit,
        )
        return True
