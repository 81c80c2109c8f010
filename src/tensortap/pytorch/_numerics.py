"""Numerics statistics (``tensortap.core._numerics``) of a torch tensor, on its device.

Statistics asked for together share their passes over the data: the finite mask and the
magnitudes (``|x|``, 0 where not finite) are computed once, as are the largest magnitude and the
smallest non-zero one.
"""

from __future__ import annotations

import torch

from tensortap.core._numerics import FORMATS


class TensorNumerics:
    """Numerics statistics of one tensor, each a 0-d tensor on its device (passes shared)."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x
        self._finite: torch.Tensor | None = None
        self._magnitude: torch.Tensor | None = None
        self._top: torch.Tensor | None = None

    @property
    def finite(self) -> torch.Tensor:
        if self._finite is None:
            self._finite = torch.isfinite(self.x)
        return self._finite

    @property
    def magnitude(self) -> torch.Tensor:
        if self._magnitude is None:
            zero = torch.zeros((), dtype=self.x.dtype, device=self.x.device)
            self._magnitude = torch.where(self.finite, self.x.abs(), zero)
        return self._magnitude

    @property
    def top(self) -> torch.Tensor:
        if self._top is None:
            self._top = self.magnitude.max()
        return self._top

    def get(self, name: str) -> torch.Tensor:
        x = self.x
        if name == "nonfinite":
            return (x.numel() - self.finite.sum()).to(x.dtype)
        if x.numel() == 0:
            return x.new_zeros(())
        magnitude = self.magnitude
        if name == "amax":
            return self.top
        if name == "dynamic_range":
            nonzero = magnitude > 0
            bottom = torch.where(nonzero, magnitude, torch.full_like(magnitude, torch.inf)).min()
            spread = torch.log2(self.top) - torch.log2(bottom)
            return torch.where(self.top > 0, spread, torch.zeros_like(spread))
        kind, _, fmt = name.partition("_")
        limits = FORMATS[fmt]
        if kind == "underflow":
            hit = (magnitude > 0) & (magnitude < limits.smallest_normal)
        else:
            hit = magnitude > limits.largest
        return hit.sum().to(x.dtype) / x.numel()
