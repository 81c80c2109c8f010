"""What a replayer keeps of each step to replay it (see :mod:`tensortap.pytorch._replay`).

A :class:`Capture` holds, per step, the batch (or what names it), the RNG state before its
forward pass, each trained parameter's version counter and the model's train/eval mode; after
its backward pass, :func:`fingerprint` adds the loss's and the gradients' norms and the weights'
norms, on the device, without waiting for it. :func:`weights_unchanged` is the replay's
precondition: the weights are still those of the step, before its update.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tensortap.pytorch._replay_state import RngState


@dataclass
class Capture:
    step: int
    batch: Any
    batch_id: Any
    rng: RngState
    versions: list[int]
    training: bool  #: the model's train/eval mode in the step
    #: [loss, norm of each gradient held]: float32, on the device (None before after_backward)
    fingerprint: torch.Tensor | None = None
    has_grad: tuple[bool, ...] = ()
    weights: torch.Tensor | None = None  #: norm of each trained parameter, float32
    restores: int = 0  #: rollbacks done (by a rollback the replayer follows) when captured


def fingerprint(
    params: list[torch.nn.Parameter], loss: Any
) -> tuple[torch.Tensor, tuple[bool, ...], torch.Tensor]:
    """[loss, norm of each gradient held], which parameters hold one, and each parameter's
    norm: float32 on the loss's device, by one fused ``torch._foreach_norm`` (no host sync)."""
    has_grad = tuple(p.grad is not None for p in params)
    grads = [p.grad.detach() for p in params if p.grad is not None]
    weights = [p.detach() for p in params]
    # float32 norms, whatever the dtype: a bfloat16 norm would hide small changes
    norms = torch._foreach_norm(weights + grads, 2, dtype=torch.float32) if weights else []
    value = loss.detach() if isinstance(loss, torch.Tensor) else torch.tensor(float(loss))
    device = value.device
    value = value.float().reshape(-1)
    if value.numel() != 1:
        value = value.sum().reshape(1)
    parts = [n.float().to(device, non_blocking=True).reshape(1) for n in norms]
    prints = torch.cat([value, *parts[len(weights) :]])
    weight_norms = torch.cat(parts[: len(weights)]) if weights else value.new_zeros(0)
    return prints, has_grad, weight_norms


def weights_unchanged(params: list[torch.nn.Parameter], capture: Capture) -> bool:
    """Whether the weights are those of ``capture``'s step, before its update: no version
    counter moved since, or where one moved, the weight's norm is bitwise the one taken after
    the step's backward pass (an update multiplied by 0 changes nothing)."""
    moved = [
        i for i, (p, v) in enumerate(zip(params, capture.versions, strict=True)) if p._version != v
    ]
    if not moved:
        return True
    now = torch._foreach_norm([params[i].detach() for i in moved], 2, dtype=torch.float32)
    before = capture.weights
    assert before is not None
    return all(
        torch.equal(n.float().reshape(()).cpu(), before[i].cpu())
        for n, i in zip(now, moved, strict=True)
    )


__all__ = ["Capture", "fingerprint", "weights_unchanged"]
