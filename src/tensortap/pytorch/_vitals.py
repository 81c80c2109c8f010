"""The PyTorch hook's vital signs (:mod:`tensortap.core._vitals`): gathered as the step runs,
saved when it ends, at every step whatever else is due.

- ``vitals/loss``: the losses the step's code handed over, in this order of preference: those
  of ``record_loss`` (a trainer callback's: the Trainer's own loss) averaged; else the registered
  loss modules' outputs averaged (the mean over micro-batches under gradient accumulation);
  else the sum of what went into ``backward()`` (a script dividing each micro-batch's loss by
  the accumulation, as trainers do, sums to the mean). At EVAL steps the same, without backward.
- ``vitals/grad_norm``: the total L2 norm of the registered models' gradients, as
  ``torch.nn.utils.get_total_norm`` computes it (one ``_foreach_norm``; only at steps where the
  ``vitals`` collection is due, so thinning it thins this pass too), taken once per step at
  the first of: a clip of the gradients by norm (the total norm ``clip_grad_norm_`` returns:
  not computed twice) or by value (before it), the optimizer's step (before it),
  ``save_gradients`` (a trainer's moment), a backward pass when no optimizer is known.
- ``vitals/lr`` (``vitals/lr/<k>``), ``vitals/loss_scale``: read from the optimizers and the
  GradScaler when the step ends.
- ``vitals/step_time``, ``vitals/samples_per_second``: from the previous TRAIN step's end (or
  this step's first forward) to this one's end; samples from dim 0 of the model's first tensor
  input of each TRAIN forward, or as a trainer callback counts them (:meth:`count_samples`).

Values stay on their device while the step runs; at its end they are read back together, one
transfer per device. A CUDA device's values are copied into pinned host memory without waiting
(one non-blocking copy behind the step's work), and the writer thread waits for that copy
before it writes them: the training thread never synchronises with the device for them. On
other devices (MPS, XLA) the values are read as the step ends.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from tensortap.core._modes import ModeKeys
from tensortap.core._recorder import StepRecorder
from tensortap.core._vitals import VITALS, Vital
from tensortap.pytorch._device_stats import Fence

_Number = float | torch.Tensor


def batch_size(args: Any) -> int | None:
    """dim 0 of the first tensor among a forward's positional arguments (or in a dict or a
    sequence given first), None when there is none."""
    if not isinstance(args, tuple) or not args:
        return None
    first = args[0]
    if isinstance(first, dict):
        first = next((v for v in first.values() if isinstance(v, torch.Tensor)), None)
    elif isinstance(first, list | tuple):
        first = next((v for v in first if isinstance(v, torch.Tensor)), None)
    if isinstance(first, torch.Tensor) and first.dim() > 0:
        return int(first.shape[0])
    return None


_FOREACH_DEVICES = frozenset(("cpu", "cuda"))
_IN_VITALS = (VITALS,)


def total_norm(grads: list[torch.Tensor]) -> torch.Tensor | None:
    """The total L2 norm of ``grads`` (clip_grad_norm_'s), None without any.

    Gradients of one device and dtype (the usual case) take the same two kernels as
    ``torch.nn.utils.get_total_norm`` (``_foreach_norm``, then the norm of the stacked norms),
    so the value is the one ``clip_grad_norm_`` returns, bit for bit; without its Python
    around them (grouping by device and dtype, checking foreach support per tensor), which
    cost a small model's step more than the kernels. Others go through ``get_total_norm``."""
    if not grads:
        return None
    first = grads[0]
    device, dtype = first.device, first.dtype
    if device.type in _FOREACH_DEVICES and all(
        type(g) is torch.Tensor and g.dtype == dtype and g.device == device for g in grads
    ):
        with torch.no_grad():
            norms = torch._foreach_norm(grads, 2.0)
            total: torch.Tensor = torch.linalg.vector_norm(torch.stack(norms), 2.0)
            return total
    return torch.nn.utils.get_total_norm(grads, 2.0)


class StepVitals:
    """What one hook gathers of the current step's vital signs (see the module docstring)."""

    def __init__(self, recorder: StepRecorder) -> None:
        self._recorder = recorder
        self._recorded: list[_Number] = []
        self._module_losses: list[torch.Tensor] = []
        self._named_losses = False  # a TRAIN step's loss came from a loss module or record_loss
        self._backward_losses: list[torch.Tensor] = []
        self._grad_norm: torch.Tensor | None = None
        self._provisional = False
        self._rates: list[_Number] = []  # of the optimizers that stepped, as they stepped
        self._stepped: list[torch.optim.Optimizer] = []
        self._samples = 0
        self._given_samples = 0
        self._start: float | None = None  # the current TRAIN step's first forward
        self._last_end: float | None = None  # the previous TRAIN step's end

    @property
    def enabled(self) -> bool:
        return VITALS in self._recorder.include_collections

    # -- as the step runs --
    def on_forward(self, args: Any) -> None:
        if self._recorder.mode != ModeKeys.TRAIN:
            return
        if self._start is None:
            self._start = time.perf_counter()
        n = batch_size(args)
        if n is not None:
            self._samples += n

    def count_samples(self, n: int) -> None:
        """A trainer's count of the samples of this step (preferred to the forwards' sizes)."""
        self._given_samples += int(n)

    def on_recorded_loss(self, loss: Any) -> None:
        self._named_losses |= self._recorder.mode == ModeKeys.TRAIN
        if isinstance(loss, torch.Tensor):
            if loss.numel() == 1:
                self._recorded.append(loss.detach().reshape(()))
        elif isinstance(loss, int | float | np.floating | np.integer) and not isinstance(
            loss, bool
        ):
            self._recorded.append(float(loss))

    def on_module_loss(self, output: Any) -> None:
        if isinstance(output, torch.Tensor) and output.numel() == 1:
            self._module_losses.append(output.detach().reshape(()))
            self._named_losses |= self._recorder.mode == ModeKeys.TRAIN

    @property
    def wants_backward_loss(self) -> bool:
        """Whether the loss must be taken from ``backward()``: saving vital signs, and no
        TRAIN step has shown a loss module's or ``record_loss``'s loss yet."""
        return not self._named_losses and self.enabled

    def on_backward_loss(self, loss: torch.Tensor) -> None:
        if self._recorder.mode == ModeKeys.TRAIN:
            self._backward_losses.append(loss.detach().reshape(()))

    @property
    def grad_norm_taken(self) -> bool:
        return self._grad_norm is not None and not self._provisional

    def on_gradients(
        self,
        params: Iterable[torch.Tensor],
        inverse: torch.Tensor | None = None,
        provisional: bool = False,
    ) -> None:
        """Take the total gradient norm of ``params`` (once per step; times ``inverse``, the
        GradScaler's 1 / scale, for gradients still scaled). A ``provisional`` norm (after a
        backward pass, no optimizer known) gives way to a later one."""
        recorder = self._recorder
        if self.grad_norm_taken or recorder.mode != ModeKeys.TRAIN:
            return
        if not recorder.is_collection_due(VITALS):
            return  # the one dear vital sign (a pass over every gradient): where saved only
        self._provisional = provisional
        grads = [g for p in params if (g := p.grad) is not None and p.requires_grad]
        norm = total_norm(grads)
        if norm is not None and inverse is not None:
            norm = norm.double() * inverse.to(norm.device)
        self._grad_norm = norm

    def on_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """An optimizer of the registered models is about to step: its groups' rates, as
        this update uses them (before a scheduler moves them on)."""
        if (
            self._recorder.mode != ModeKeys.TRAIN
            or any(o is optimizer for o in self._stepped)
            or not self.enabled
        ):
            return
        self._stepped.append(optimizer)
        for group in optimizer.param_groups:
            lr = group.get("lr")
            if isinstance(lr, torch.Tensor) and lr.numel() == 1:
                self._rates.append(lr.detach().reshape(()))
            elif isinstance(lr, int | float) and not isinstance(lr, bool):
                self._rates.append(float(lr))

    def take_grad_norm(self, norm: torch.Tensor) -> None:
        """The total norm a clip computed (``clip_grad_norm_``'s result), before clipping."""
        taken = self.grad_norm_taken or not self.enabled
        if not taken and self._recorder.mode == ModeKeys.TRAIN and norm.numel() == 1:
            self._grad_norm, self._provisional = norm.detach().reshape(()), False

    # -- when the step ends --
    def take(self, scaler: Any) -> None:
        """Save the step's vital signs (the recorder's step-end callback), then start afresh."""
        try:
            if self.enabled:
                self._save(scaler)
        finally:
            self._recorded, self._module_losses, self._backward_losses = [], [], []
            self._grad_norm = None
            self._rates, self._stepped = [], []
            self._samples = self._given_samples = 0
            self._start = None

    def _loss(self) -> _Number | None:
        if self._recorded:
            return _mean(self._recorded)
        if self._module_losses:
            return _mean(self._module_losses)
        if self._backward_losses:
            first = self._backward_losses[0]
            if len(self._backward_losses) == 1:
                return first
            return torch.stack(
                [x.to(first.device, torch.float32) for x in self._backward_losses]
            ).sum()
        return None

    def _save(self, scaler: Any) -> None:
        values: dict[str, _Number] = {}
        loss = self._loss()
        if loss is not None:
            values[Vital.LOSS] = loss
        if self._recorder.mode == ModeKeys.TRAIN:
            now = time.perf_counter()
            began = self._last_end if self._last_end is not None else self._start
            self._last_end = now
            if self._grad_norm is not None:
                values[Vital.GRAD_NORM] = self._grad_norm
            values.update(_learning_rates(self._rates))
            if scaler is not None and scaler.is_enabled():
                scale = getattr(scaler, "_scale", None)
                if isinstance(scale, torch.Tensor):
                    values[Vital.LOSS_SCALE] = scale
            if began is not None and now > began:
                values[Vital.STEP_TIME] = now - began
                samples = self._given_samples or self._samples
                if samples:
                    values[Vital.SAMPLES_PER_SECOND] = samples / (now - began)
        else:
            self._last_end = None  # the next TRAIN step's time starts at its first forward
        numbers, arriving = _read(values)
        recorder = self._recorder
        for name, number in numbers.items():
            recorder.record(name, number, _IN_VITALS)  # a float: the recorder's fast path
        for name, array, fence in arriving:
            recorder.record_arriving(name, array, fence, _IN_VITALS)  # the writer waits for it


def _mean(values: Sequence[_Number]) -> _Number:
    if len(values) == 1:
        return values[0]
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if not tensors:
        return float(np.mean([float(v) for v in values]))
    device = tensors[0].device
    return torch.stack(
        [torch.as_tensor(v, dtype=torch.float32, device=device).reshape(()) for v in values]
    ).mean()


def _learning_rates(rates: Sequence[_Number]) -> dict[str, _Number]:
    """``vitals/lr`` of the first parameter group, and ``vitals/lr/<k>`` of every group when
    the groups' rates differ (numbered across the optimizers, in order)."""
    if not rates:
        return {}
    out: dict[str, _Number] = {Vital.LR: rates[0]}
    if len(rates) > 1 and any(not _same(r, rates[0]) for r in rates[1:]):
        out.update({f"{Vital.LR}/{k}": r for k, r in enumerate(rates) if k >= 1})
    return out


def _same(a: _Number, b: _Number) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return a is b
    return a == b


def _read(
    values: dict[str, _Number],
) -> tuple[dict[str, float], list[tuple[str, np.ndarray[Any, Any], Fence]]]:
    """The values as floats, the tensors of each device read back in one transfer; a CUDA
    device's are returned as arriving instead: 0-d float64 arrays over pinned host memory that
    a non-blocking copy fills, each with the fence to wait on before reading it."""
    out = {k: v for k, v in values.items() if isinstance(v, float)}
    arriving: list[tuple[str, np.ndarray[Any, Any], Fence]] = []
    by_device: dict[torch.device, list[tuple[str, torch.Tensor]]] = {}
    for name, value in values.items():
        if isinstance(value, torch.Tensor):
            if value.device.type == "cpu":
                out[name] = float(value.item())  # no transfer: cheaper than stacking
            else:
                by_device.setdefault(value.device, []).append((name, value))
    for device, items in by_device.items():
        dtype = torch.float32 if device.type == "mps" else torch.float64
        stacked = torch.stack([t.detach().reshape(()).to(dtype) for _, t in items])
        if device.type == "cuda":
            # NaN until the copy lands: a device that fails before then leaves NaN, not garbage
            host = torch.full(stacked.shape, math.nan, dtype=dtype, pin_memory=True)
            host.copy_(stacked, non_blocking=True)
            fence = Fence(device)
            array = host.numpy()  # keeps the pinned buffer alive until the writer is done
            arriving.extend((name, array[i, ...], fence) for i, (name, _) in enumerate(items))
            continue
        for (name, _), number in zip(items, stacked.cpu().tolist(), strict=True):
            out[name] = float(number)
    return out, arriving
