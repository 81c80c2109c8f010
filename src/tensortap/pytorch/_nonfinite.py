"""Which tensor of a state dict is not finite: one host read per device for all of them.
The checkpoint guard (:mod:`tensortap.pytorch._checkpoint_guard`), the rollback's catalogue
(:mod:`tensortap.pytorch._checkpoints`) and the trainers' checkpoint adapters ask it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch


def nonfinite_name(state: Mapping[str, Any], prefix: str = "") -> str | None:
    """The name of the first floating-point tensor in ``state`` (nested dicts and lists of
    tensors, as a state dict) with a NaN or an infinity, or None when all are finite. One
    host read per device for all of them."""
    named = list(_float_tensors(state, prefix))
    if not named:
        return None
    by_device: dict[torch.device, list[int]] = {}
    for index, (_, tensor) in enumerate(named):
        by_device.setdefault(tensor.device, []).append(index)
    ok = [True] * len(named)
    for indices in by_device.values():  # one read per device
        flags = torch.stack([_finite(named[i][1]) for i in indices]).tolist()
        for i, flag in zip(indices, flags, strict=True):
            ok[i] = bool(flag)
    return next((name for (name, _), fine in zip(named, ok, strict=True) if not fine), None)


def _finite(tensor: torch.Tensor) -> torch.Tensor:
    """Whether every value of ``tensor`` is finite, as a bool tensor on its device: its least
    and greatest value (NaN propagates through both), 16 times faster on the CPU than
    ``isfinite(t).all()``, which writes a mask as large as the tensor."""
    if tensor.is_complex():
        tensor = torch.view_as_real(tensor)
    if tensor.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=tensor.device)
    low, high = torch.aminmax(tensor)
    return torch.isfinite(low) & torch.isfinite(high)


def _float_tensors(value: Any, name: str) -> Iterable[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex():
            local = getattr(value, "to_local", None)  # a DTensor: this rank's shard
            yield name or "tensor", (local() if callable(local) else value).detach()
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _float_tensors(item, f"{name}.{key}" if name else str(key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _float_tensors(item, f"{name}.{index}" if name else str(index))
