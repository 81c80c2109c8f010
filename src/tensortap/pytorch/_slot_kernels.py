"""Computing rows of slots on a tensor's device (see :mod:`tensortap.pytorch._slots`):
:func:`row_of` (one tensor, traced by Dynamo into one fused pass), :func:`slot_rows` (a group
of tensors: compiled on CUDA, multi-tensor ``foreach`` kernels elsewhere) and
:func:`empty_rows` (what merging starts from). The meaning of each slot is in
:mod:`tensortap.pytorch._slot_layout`.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import torch

from tensortap.pytorch._slot_layout import SLOTS, SUMMED

logger = logging.getLogger("tensortap.pytorch._slots")  # one logger for the slots' messages
_INF = float("inf")


def _accumulator(t: torch.Tensor) -> torch.dtype:
    if t.dtype == torch.float64 or t.device.type == "cpu":
        return torch.float64
    return torch.float32


def row_of(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The slots of ``x`` as one row, accumulated in ``dtype``. Traced by Dynamo (inside a
    compiled model, or compiled by itself), its reductions fuse into one pass over ``x``."""
    x = x.detach().to(dtype)
    low, high = torch.aminmax(x)
    n = torch.full((), x.numel(), dtype=dtype, device=x.device)
    square = x * x
    return torch.stack(
        [
            n,
            n - torch.isfinite(x).sum().to(dtype),
            n - torch.linalg.vector_norm(x, 0),
            x.sum(),
            x.abs().sum(),
            square.sum(),
            (square * square).sum(),
            torch.maximum(high.abs(), low.abs()),
            high,
            -low,
        ]
    )


KERNELS = ("auto", "foreach", "compiled")
_compiled_row: Any = None
_compiled_failed = False


def _fused_rows(tensors: list[torch.Tensor], acc: torch.dtype) -> torch.Tensor | None:
    """Each tensor's row by one compiled function (one fused pass per tensor, the size
    symbolic so one graph serves every shape); None where compiling is not possible."""
    global _compiled_row, _compiled_failed
    if _compiled_failed or torch.compiler.is_compiling():
        return None
    try:
        if _compiled_row is None:
            _compiled_row = torch.compile(row_of, dynamic=True, fullgraph=True)
        return torch.stack([_compiled_row(t.reshape(-1), acc) for t in tensors])
    except Exception:  # no working compiler here (e.g. no triton): the foreach kernels
        _compiled_failed = True
        logger.warning("tensortap: slot statistics fall back to foreach kernels", exc_info=True)
        return None


def slot_rows(
    tensors: list[torch.Tensor],
    numels: dict[Any, torch.Tensor] | None = None,
    kernel: str = "auto",
) -> torch.Tensor:
    """``[len(tensors), SLOTS]``: see :func:`_slot_rows`; outside autocast and autograd (the
    hook computes rows inside a model's forward, too)."""
    device = tensors[0].device.type
    plain = torch.autocast(device, enabled=False) if device in ("cpu", "cuda") else None
    with torch.no_grad(), plain or contextlib.nullcontext():
        return _slot_rows(tensors, numels, kernel)


def _slot_rows(
    tensors: list[torch.Tensor],
    numels: dict[Any, torch.Tensor] | None = None,
    kernel: str = "auto",
) -> torch.Tensor:
    """``[len(tensors), SLOTS]`` rows of slots of non-empty floating tensors of one device and
    dtype. ``kernel``: ``foreach``: multi-tensor norms of orders 0 and 1, and per tensor one
    ``aminmax``, ``sum``, finite count and two dot products (about eight passes over the
    data); ``compiled``: one fused pass per tensor (``row_of`` compiled); ``auto``: compiled
    on CUDA, foreach elsewhere. ``numels`` caches the sizes as device tensors (made once per
    set of shapes, no copy)."""
    acc = _accumulator(tensors[0])
    device = tensors[0].device
    if kernel == "compiled" or (kernel == "auto" and device.type == "cuda"):
        fused = _fused_rows(tensors, acc)
        if fused is not None:
            return fused
    key = (device, acc, tuple(t.numel() for t in tensors))
    numel = None if numels is None else numels.get(key)
    if numel is None:
        numel = torch.stack([torch.full((), float(n), dtype=acc, device=device) for n in key[2]])
        if numels is not None:
            numels[key] = numel
    nnz, l1 = (torch.stack(torch._foreach_norm(tensors, order, dtype=acc)) for order in (0, 1))
    # Σx² and Σx⁴ as dot products of the widened values (BLAS; the norms of orders 2 and 4
    # would round through a square root, and order 4 has no fast kernel)
    squares, fourths = [], []
    for t in tensors:
        x = t.reshape(-1).to(acc)
        square = x * x
        squares.append(torch.dot(x, x))
        fourths.append(torch.dot(square, square))
    extremes = [torch.aminmax(t) for t in tensors]
    low = torch.stack([lo for lo, _ in extremes]).to(acc)
    high = torch.stack([hi for _, hi in extremes]).to(acc)
    sums = torch.stack([t.sum(dtype=acc) for t in tensors])
    finite = torch.stack([torch.isfinite(t).sum() for t in tensors]).to(acc)
    columns = [
        numel,
        numel - finite,
        numel - nnz,
        sums,
        l1,
        torch.stack(squares),
        torch.stack(fourths),
        torch.maximum(high.abs(), low.abs()),
        high,
        -low,
    ]
    return torch.stack(columns, dim=1)


def empty_rows(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``n`` rows of slots of no values (sums 0, maxima -inf): what merging starts from."""
    rows = torch.zeros((n, len(SLOTS)), dtype=dtype, device=device)
    rows[:, SUMMED:] = -_INF
    return rows


__all__ = ["KERNELS", "empty_rows", "row_of", "slot_rows"]
