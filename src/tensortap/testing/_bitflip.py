"""A fault injector for testing attribution by replay (:mod:`tensortap.pytorch._replay`) and a
training setup's handling of silent data corruption: one bit of one element of a module's output
(a ``Linear``'s GEMM, say) flipped at one call.

::

    from tensortap.testing import inject_bitflip

    flip = inject_bitflip(model.fc2, step=3)   # the 4th training call of model.fc2
    ...                                        # train: step 3 goes wrong, its replay does not
    flip.remove()

Calls are counted while gradients are enabled (training passes; evaluation under
``torch.no_grad()`` does not count), from 0: with one forward pass per step, call ``n`` is step
``n``. With ``once=True`` (default) only that call is corrupted, so a replay of the step (the
next call) computes the right value: a transient fault. With ``once=False`` every call from
then on is: a persistent one. The flipped element replaces the output's through
``torch.where``, so the gradient flows as for any other value. Imports torch: import it from
``tensortap.testing`` (loaded at first use) or from this module.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tensortap.exceptions import InvalidConfigError

# the integer type of each float type's width, to flip a bit of its representation
_BITS = {
    torch.float64: (torch.int64, 64),
    torch.float32: (torch.int32, 32),
    torch.float16: (torch.int16, 16),
    torch.bfloat16: (torch.int16, 16),
}
# the most significant exponent bit: flipping it turns a value below 2 into a huge one
_TOP_EXPONENT_BIT = {torch.float64: 62, torch.float32: 30, torch.float16: 14, torch.bfloat16: 14}


class BitFlip:
    """The handle :func:`inject_bitflip` returns: ``calls`` counted, ``flips`` made,
    :meth:`remove` to take the injector away."""

    def __init__(self, step: int, once: bool, index: int, bit: int | None) -> None:
        self.step, self.once, self.index, self.bit = step, once, index, bit
        self.calls = 0
        self.flips = 0
        self._handle: Any = None

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _forward(self, module: nn.Module, args: Any, output: Any) -> Any:
        if not torch.is_grad_enabled():
            return None
        call, self.calls = self.calls, self.calls + 1
        if call < self.step or (self.once and call != self.step):
            return None
        if isinstance(output, torch.Tensor):
            self.flips += 1
            return flip_bit(output, self.index, self.bit)
        if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
            self.flips += 1
            return type(output)([flip_bit(output[0], self.index, self.bit), *output[1:]])
        raise InvalidConfigError(
            f"inject_bitflip: the module's output must be a tensor (or start with one), got "
            f"{type(output).__name__}"
        )


def flip_bit(tensor: torch.Tensor, index: int = 0, bit: int | None = None) -> torch.Tensor:
    """``tensor`` with bit ``bit`` (default: the most significant exponent bit) of its element
    ``index`` (in row-major order) flipped; differentiable like ``tensor`` elsewhere."""
    if tensor.dtype not in _BITS:
        raise InvalidConfigError(
            f"flip_bit flips bits of float16, bfloat16, float32 and float64 tensors, got "
            f"{tensor.dtype}"
        )
    ints, width = _BITS[tensor.dtype]
    bit = _TOP_EXPONENT_BIT[tensor.dtype] if bit is None else bit
    if not (0 <= bit < width):
        raise InvalidConfigError(f"flip_bit: a {tensor.dtype} has bits 0-{width - 1}, got {bit}")
    if not (0 <= index < tensor.numel()):
        raise InvalidConfigError(
            f"flip_bit: element {index} asked for, the tensor has {tensor.numel()} elements"
        )
    mask_bits = 1 << bit if bit < width - 1 else -(1 << bit)  # the sign bit, as a signed int
    with torch.no_grad():
        value = tensor.detach().reshape(-1)[index : index + 1].clone().view(ints)
        value ^= mask_bits
        where = torch.zeros(tensor.numel(), dtype=torch.bool, device=tensor.device)
        where[index] = True
    return torch.where(where.view(tensor.shape), value.view(tensor.dtype), tensor)


def inject_bitflip(
    module: nn.Module,
    step: int,
    *,
    once: bool = True,
    index: int = 0,
    bit: int | None = None,
) -> BitFlip:
    """Flip bit ``bit`` (default: the most significant exponent bit) of element ``index`` of
    ``module``'s output at its ``step``-th training call (from 0), and only then with
    ``once`` (else at every call from then on). Returns a :class:`BitFlip`; ``remove()`` it."""
    if not isinstance(module, nn.Module):
        raise InvalidConfigError(f"inject_bitflip needs a torch.nn.Module, got {module!r}")
    for label, value in (("step", step), ("index", index)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidConfigError(f"inject_bitflip {label} must be an int >= 0, got {value!r}")
    if bit is not None and (isinstance(bit, bool) or not isinstance(bit, int) or bit < 0):
        raise InvalidConfigError(f"inject_bitflip bit must be an int >= 0 or None, got {bit!r}")
    flip = BitFlip(step, once, index, bit)
    flip._handle = module.register_forward_hook(flip._forward)
    return flip


__all__ = ["BitFlip", "flip_bit", "inject_bitflip"]
