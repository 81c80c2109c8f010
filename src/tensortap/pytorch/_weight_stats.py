"""Statistics of weights and gradients read for the training-loop facts, each batch of them
with one copy per device (a wait for the device: callers read them rarely): norms, and how
large the Linear and convolution weights start."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

import torch
from torch import nn

from tensortap.pytorch._naming import unwrap
from tensortap.pytorch._sharded import dtensor_kind, local_part

#: The layers whose starting scale is judged: their fan-in is the weight's row size.
SCALED = (nn.Linear, nn.modules.conv._ConvNd)


def local(t: torch.Tensor) -> torch.Tensor:
    """This process's part of ``t`` (a sharded DTensor's local shard), else ``t``."""
    return local_part(t) if dtensor_kind(t) else t


def per_device(
    tensors: Iterable[torch.Tensor], reduce: Callable[[list[torch.Tensor]], list[torch.Tensor]]
) -> list[float]:
    """``reduce`` (a list of tensors to a list of 0-d tensors) over ``tensors``' local parts,
    grouped by device, read back with one copy per device."""
    parts = [local(t).detach() for t in tensors]
    by_device: dict[torch.device, list[int]] = {}
    for i, t in enumerate(parts):
        by_device.setdefault(t.device, []).append(i)
    out = [0.0] * len(parts)
    for indices in by_device.values():
        group = [parts[i] for i in indices]
        values = torch.stack([v.double() for v in reduce(group)]).cpu().tolist()
        for i, v in zip(indices, values, strict=True):
            out[i] = v
    return out


def norms(tensors: Iterable[torch.Tensor]) -> list[float]:
    """The l2 norm of each tensor."""
    return per_device(tensors, lambda group: list(torch._foreach_norm(group)))


def init_scales(model: nn.Module, names: Mapping[int, str]) -> dict[str, float]:
    """``std(w) * sqrt(fan_in)`` of each trained Linear and convolution weight of ``model``
    named in ``names`` (a parameter's id to its name): 0.58 for PyTorch's default
    initialisation, 1.41 for Kaiming/He, at most about 2.4 for any standard scheme."""
    weights: list[tuple[str, torch.Tensor]] = []
    for module in unwrap(model).modules():
        w = getattr(module, "weight", None)
        if not isinstance(module, SCALED) or not isinstance(w, nn.Parameter):
            continue
        if not w.requires_grad or isinstance(w, nn.parameter.UninitializedParameter):
            continue
        if id(w) in names and w.dim() >= 2 and local(w).numel() > 1:
            weights.append((names[id(w)], w))
    if not weights:
        return {}
    stds = per_device([w for _, w in weights], lambda group: [t.float().std() for t in group])
    scales = {}
    for (name, w), std in zip(weights, stds, strict=True):
        scale = std * math.sqrt(local(w)[0].numel())
        if math.isfinite(scale):
            scales[name] = scale
    return scales
