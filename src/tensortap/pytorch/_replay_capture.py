"""What a replayer keeps of each step to replay it (see :mod:`tensortap.pytorch._replay`).

A :class:`Capture` holds, per step, the batch (or what names it), the RNG state before its
forward pass, each trained parameter's version counter and the model's train/eval mode; after
its backward pass, :func:`fingerprint` adds the loss's and the gradients' norms and the weights'
norms, on the device, without waiting for it. :func:`weights_unchanged` is the replay's
precondition: the weights are still those of the step, before its update.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
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
    #: the batch's tensors' version counters, taken again after the backward pass (a loader
    #: that refills one buffer in place moves them later)
    batch_marks: tuple[int, ...] = ()


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


def batch_tensors(value: Any) -> Iterator[torch.Tensor]:
    """Every tensor in a batch (tokens too), in a fixed order."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from batch_tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from batch_tensors(item)


def batch_marks(batch: Any) -> tuple[int, ...]:
    """Each tensor of ``batch``: its version counter (no device work; -1 where a tensor keeps
    none, as those made under ``torch.inference_mode``)."""
    marks = []
    for t in batch_tensors(batch):
        try:
            marks.append(int(t._version))
        except RuntimeError:
            marks.append(-1)
    return tuple(marks)


def batch_overwritten(capture: Capture) -> bool:
    """Whether ``capture``'s batch was changed in place since the step's backward pass (a
    version counter moved: a loader that refills one buffer, ``buffer.copy_(next_batch)``),
    so that it is no longer the batch the step trained. (The step's own in-place changes, made
    before :meth:`Replayer.after_backward` takes the marks again, do not count.)"""
    return capture.batch is not None and batch_marks(capture.batch) != capture.batch_marks


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


__all__ = [
    "Capture",
    "batch_marks",
    "batch_overwritten",
    "batch_tensors",
    "fingerprint",
    "weights_unchanged",
]
