"""The guard's decision, made on the device with tensor operations only: nothing in here reads
a tensor's value on the host, so a step costs no host synchronisation.

Per step, :class:`DeviceDecision`

- before ``optimizer.step()``: takes the gradient norm (one fused ``torch._foreach_norm``) and
  copies the parameters, and the optimizer's state tensors, into buffers allocated once
  (``torch._foreach_copy_``);
- after it: takes the norm of the applied update (new minus old parameters), scores the loss,
  the gradient norm and the update norm against a window of the last accepted steps (median and
  MAD over its finite entries), makes six 0/1 reasons (non-finite or spike, for each signal),
  agrees on them across ranks (one all-reduce, MAX, of those six numbers), and, where any is
  set, puts the parameters and the optimizer state back as they were with ``torch.where``: the
  0/1 factor applied to the update, whatever the optimizer;
- writes the step's statistics as one row of a ring on the device (:data:`WIDTH` numbers, laid
  out below), which the guard copies to the host without blocking and reads on its own thread.

Why median/MAD and not mean/std: the window holds accepted steps, which include moderate
outliers below the threshold; they inflate a standard deviation and blunt the test, not a MAD.
It also scores exactly as :class:`tensortap.core._baseline.RobustBaseline`, which the spike rules
use. The cost is one sort of a 3 x ``window`` matrix per step. A non-finite value never enters
the window (the entries are NaN until filled, and NaN entries are masked out of the median and
the MAD), so one NaN cannot make the statistics NaN, and a tripped step does not enter either.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

# The columns of one step's row.
LOSS, GRAD_NORM, UPDATE_NORM = 0, 1, 2
MEDIAN = 3  #: 3, 4, 5: the window's medians of the loss, gradient norm, update norm
Z = 6  #: 6, 7, 8: their robust z-scores (NaN in the warm-up)
BITS = 9  #: 9..14: the reasons agreed by every rank, 1.0 or 0.0: non-finite loss, gradient
#: norm, update norm; spike of the loss, gradient norm, update norm
SKIPPED = 15  #: 1.0 when the update was undone
WIDTH = 16
SIGNALS = ("loss", "grad_norm", "update_norm")
#: How an update is undone. "snapshot": parameters and optimizer state copied before the step
#: and put back with ``torch.where`` (any optimizer; memory and passes over them). "optimizer":
#: the optimizer's own skip, for those that declare ``_step_supports_amp_scaling`` (PyTorch's
#: fused Adam, AdamW, SGD, Adagrad): the guard decides before the step and sets the optimizer's
#: ``found_inf``, which its fused kernels honour on the device, as they do for a GradScaler's
#: overflow (nothing copied; the update norm is not measured). "none": nothing is undone.
UNDO_MODES = ("snapshot", "optimizer", "none")

log = logging.getLogger(__name__)
Reduce = Callable[[torch.Tensor], None]
_TINY = float(torch.finfo(torch.float32).tiny)


def _update_norm(params: list[torch.Tensor], copies: list[torch.Tensor]) -> torch.Tensor:
    """The l2 norm of ``params - copies``, all tensors together (one fused pass when
    compiled: no tensor of differences is made)."""
    norms = [torch.linalg.vector_norm((p - c).float()) for p, c in zip(params, copies, strict=True)]
    total: torch.Tensor = torch.linalg.vector_norm(torch.stack(norms))
    return total


def _select(tripped: torch.Tensor, targets: list[torch.Tensor], copies: list[torch.Tensor]) -> None:
    """``targets`` become ``copies`` where ``tripped`` (the compiled form of the undo)."""
    for target, copy in zip(targets, copies, strict=True):
        target.copy_(torch.where(tripped, copy, target))


def total_norm(tensors: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """The l2 norm of all ``tensors`` together, as a float32 0-d tensor (fused kernels)."""
    if not tensors:
        return torch.zeros((), device=device)
    norms = torch._foreach_norm(tensors)
    total: torch.Tensor = torch.linalg.vector_norm(torch.stack([n.float() for n in norms]))
    return total


@dataclass
class _Verdict:
    """One step's decision, all on the device."""

    values: torch.Tensor  # loss, gradient norm, update norm
    median: torch.Tensor
    z: torch.Tensor
    bits: torch.Tensor  # the six reasons, agreed by every rank
    tripped: torch.Tensor  # 0-d bool
    fresh: torch.Tensor  # what enters the window (NaN where absent or not finite)
    accept: torch.Tensor  # 0-d bool: whether it enters


class DeviceDecision:
    """The per-step decision of a guard (see the module docstring). ``undo``: put the update
    back when the guard trips: ``"snapshot"`` (copies and ``torch.where``, any optimizer),
    ``"optimizer"`` (the optimizer's own skip, see :data:`UNDO_MODES`) or ``"none"`` (action
    record); ``measure_update``: take the update norm (needs the copy of the parameters, made
    anyway for ``"snapshot"``; not available with ``"optimizer"``)."""

    def __init__(
        self,
        *,
        window: int,
        warmup: int,
        spike_z: float,
        spike_ratio: float,
        judged: Sequence[str],
        undo: str,
        measure_update: bool,
        history: int,
        compiled: bool = False,
    ) -> None:
        self.window, self.warmup, self.history = window, warmup, history
        self.compiled = compiled
        self._compiled_norm: Callable[..., torch.Tensor] | None = None
        self._compiled_select: Callable[..., None] | None = None
        if compiled:
            self._compiled_norm = torch.compile(_update_norm, dynamic=False)
            self._compiled_select = torch.compile(_select, dynamic=False)
        self.spike_z, self.spike_ratio = float(spike_z), float(spike_ratio)
        self.judged = tuple(s in judged for s in SIGNALS)
        self.undo = undo
        self.copy_params = undo == "snapshot" or (undo == "none" and measure_update)
        self.device: torch.device | None = None
        self.ring = torch.empty(0)  #: (history, WIDTH) on the device, one row per step
        self._values = torch.empty(0)  # (3, window), NaN where empty
        self._head = torch.empty(0)  # where the next accepted step goes
        self._judged = torch.empty(0)
        self._param_copies: dict[int, torch.Tensor] = {}
        self._state_copies: dict[tuple[int, str], torch.Tensor] = {}
        # this step's
        self._active: list[tuple[int, torch.Tensor]] = []
        self._state_before: list[tuple[int, str, torch.Tensor]] = []
        self._loss = torch.empty(0)
        self._grad_norm = torch.empty(0)
        self._observed = False
        self._warned_elsewhere = False
        self._decided: _Verdict | None = None  # decided before the step ("optimizer")
        self._scaler_inf: torch.Tensor | None = None  # a GradScaler's flag, where it set one
        self._keys_before: set[tuple[int, str]] = set()
        #: Whether the undo reads the decision on the host and acts only when tripped (a read
        #: on the CPU is no sync: a kept step then costs no pass over parameters and state).
        #: None: decided by the device (the CPU reads, an accelerator never does).
        self.read_on_host: bool | None = None

    @property
    def copy_bytes(self) -> int:
        """Bytes of the buffers the parameters and optimizer state are copied into."""
        buffers = [*self._param_copies.values(), *self._state_copies.values()]
        return sum(t.numel() * t.element_size() for t in buffers)

    def _allocate(self, device: torch.device) -> None:
        self.device = device
        if self.read_on_host is None:
            self.read_on_host = device.type == "cpu"
        nan = math.nan
        self.ring = torch.full((self.history, WIDTH), nan, device=device)
        self._values = torch.full((len(SIGNALS), self.window), nan, device=device)
        self._head = torch.zeros((), dtype=torch.long, device=device)
        self._judged = torch.zeros(len(SIGNALS), dtype=torch.bool, device=device)
        for i, judged in enumerate(self.judged):
            if judged:
                self._judged[i] = True  # a fill on the device, not a copy from the host

    def before(
        self,
        optimizer: torch.optim.Optimizer,
        params: list[torch.Tensor],
        loss: Any,
        reduce: Reduce | None,
        grad_norm: torch.Tensor | None = None,
    ) -> None:
        """Right before ``optimizer.step()``: the gradient norm (``grad_norm`` where the loop
        gave it: the norm before clipping), the loss, and the copies; with
        ``undo="optimizer"`` the decision too, handed to the optimizer as its ``found_inf``."""
        active = [(i, p) for i, p in enumerate(params) if p.grad is not None]
        device = active[0][1].device if active else params[0].device
        if self.device is None:
            self._allocate(device)
        assert self.device is not None
        elsewhere = [i for i, p in active if p.device != self.device]
        if elsewhere and not self._warned_elsewhere:
            self._warned_elsewhere = True
            log.warning(
                "tensortap guard: %d parameters are not on %s; the guard neither judges nor "
                "undoes their updates (one guard watches one device)",
                len(elsewhere),
                self.device,
            )
        active = [(i, p) for i, p in active if p.device == self.device]
        self._active = active
        if grad_norm is not None:
            self._grad_norm = grad_norm.detach().reshape(-1)[0].to(self.device, non_blocking=True)
        else:
            self._grad_norm = total_norm([p.grad for _, p in active], self.device)  # type: ignore[misc]
        self._observed = loss is not None
        if isinstance(loss, torch.Tensor) and loss.numel():
            self._loss = loss.detach().reshape(-1)[0].to(self.device, non_blocking=True).float()
        elif loss is not None and not isinstance(loss, torch.Tensor):
            self._loss = torch.full((), float(loss), device=self.device)
        else:
            self._observed = False
            self._loss = torch.full((), math.nan, device=self.device)
        grad_scale = getattr(optimizer, "grad_scale", None)
        if isinstance(grad_scale, torch.Tensor) and grad_norm is None:  # a GradScaler leaves
            # the unscaling to a fused optimizer (a norm the loop gave was taken unscaled)
            self._grad_norm = self._grad_norm / grad_scale.to(self.device)
        if self.undo == "optimizer":
            self._keys_before = {(i, key) for i, p in active for key in optimizer.state.get(p, {})}
            self._optimizer_skip(optimizer, reduce)
            return
        if self.copy_params and active:
            copies = [self._copy_buffer(self._param_copies, i, p) for i, p in active]
            torch._foreach_copy_(copies, [p.detach() for _, p in active])
        self._state_before = []
        if self.undo == "snapshot":
            for i, p in active:
                for key, value in optimizer.state.get(p, {}).items():
                    if isinstance(value, torch.Tensor) and value.device == self.device:
                        self._state_before.append((i, key, value))
            if self._state_before:
                copies = [
                    self._copy_buffer(self._state_copies, (i, key), t)
                    for i, key, t in self._state_before
                ]
                torch._foreach_copy_(copies, [t.detach() for _, _, t in self._state_before])

    @staticmethod
    def _copy_buffer(
        buffers: dict[Any, torch.Tensor], key: Any, like: torch.Tensor
    ) -> torch.Tensor:
        buffer = buffers.get(key)
        if buffer is None or (buffer.shape, buffer.dtype) != (like.shape, like.dtype):
            buffer = buffers[key] = torch.empty_like(like, memory_format=torch.preserve_format)
        return buffer

    def _optimizer_skip(self, optimizer: torch.optim.Optimizer, reduce: Reduce | None) -> None:
        """Decide now, and hand the flag to the optimizer as ``found_inf``: its fused step then
        leaves parameters and state alone where it is set (as for a GradScaler's overflow), at
        no cost. A GradScaler's own flag is kept: the steps it skips are its, not the guard's."""
        assert self.device is not None
        nan = torch.full((), math.nan, device=self.device)
        scaler_inf = getattr(optimizer, "found_inf", None)
        self._scaler_inf = scaler_inf if isinstance(scaler_inf, torch.Tensor) else None
        verdict = self._decide(optimizer, nan, reduce, self._scaler_inf)
        self._decided = verdict
        flag = verdict.tripped.float()
        if self._scaler_inf is not None:
            flag = torch.maximum(flag, self._scaler_inf.to(flag))
        optimizer.found_inf = flag  # type: ignore[attr-defined]

    def _zero_new_state(self, optimizer: torch.optim.Optimizer, tripped: torch.Tensor) -> None:
        """State a skipped first step created goes to zeros (fused SGD leaves its new momentum
        buffer uninitialised when it skips)."""
        for i, p in self._active:
            for key, value in optimizer.state.get(p, {}).items():
                if (i, key) in self._keys_before or not isinstance(value, torch.Tensor):
                    continue
                if value.device == self.device:
                    value.masked_fill_(tripped, 0)

    def after(
        self, optimizer: torch.optim.Optimizer, reduce: Reduce | None, slot: int
    ) -> torch.Tensor:
        """Right after ``optimizer.step()``: decide, agree, undo where tripped; returns the
        step's row of :attr:`ring` (at ``slot``)."""
        assert self.device is not None
        device, active = self.device, self._active
        if self.undo == "optimizer":
            assert self._decided is not None
            verdict, self._decided = self._decided, None
            if self._scaler_inf is not None:
                optimizer.found_inf = self._scaler_inf  # type: ignore[attr-defined]
            else:
                del optimizer.found_inf  # type: ignore[attr-defined]
            self._zero_new_state(optimizer, verdict.tripped)
            skipped = verdict.tripped.float()
        else:
            if self.copy_params and active:
                params = [p.detach() for _, p in active]
                copies = [self._param_copies[i] for i, _ in active]
                if self._compiled_norm is not None:
                    update_norm = self._compiled_norm(params, copies)
                else:
                    deltas = torch._foreach_sub(params, copies)
                    update_norm = total_norm(list(deltas), device)
                    del deltas
            else:
                update_norm = torch.full((), math.nan, device=device)
            scaler_inf = getattr(optimizer, "found_inf", None)  # a GradScaler's, fused optimizer
            if not isinstance(scaler_inf, torch.Tensor):
                scaler_inf = None
            verdict = self._decide(optimizer, update_norm, reduce, scaler_inf)
            if self.undo == "snapshot":
                self._undo(optimizer, verdict.tripped)
                skipped = verdict.tripped.float()
            else:
                skipped = torch.zeros((), device=device)
        self._accept(verdict.fresh, verdict.accept)
        self.ring[slot] = torch.cat(
            [verdict.values, verdict.median, verdict.z, verdict.bits, skipped.reshape(1)]
        )
        self._active, self._state_before, self._scaler_inf = [], [], None
        return self.ring[slot]

    def _decide(
        self,
        optimizer: torch.optim.Optimizer,
        update_norm: torch.Tensor,
        reduce: Reduce | None,
        scaler_inf: torch.Tensor | None,
    ) -> _Verdict:
        """The six reasons, agreed across ranks, and what enters the window."""
        values = torch.stack([self._loss, self._grad_norm.float(), update_norm.float()])
        measured = self.copy_params and bool(self._active)
        absent = [i for i, there in enumerate((self._observed, True, measured)) if not there]
        finite = torch.isfinite(values)
        nonfinite = ~finite
        for i in absent:
            nonfinite[i] = False
        median, z, spike = self._score(values, finite)
        for i in absent:
            spike[i] = False
        bits = torch.cat([nonfinite, spike]).float()
        if reduce is not None:
            reduce(bits)  # one all-reduce (MAX): every rank skips alike
        accept = torch.ones((), dtype=torch.bool, device=values.device)
        if scaler_inf is not None:  # the scaler's overflow: its skip, judged by nobody
            ours = scaler_inf.to(values.device) == 0
            bits = bits * ours
            accept = ours
        tripped = bits.amax() > 0
        fresh = values.clone()
        for i in absent:
            fresh[i] = math.nan
        fresh = torch.where(finite, fresh, math.nan)
        return _Verdict(values, median, z, bits, tripped, fresh, accept & ~tripped)

    def _score(
        self, values: torch.Tensor, finite: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Median, robust z-score and spike flag of each signal against the window, over its
        finite entries only (each row sorted with the empty entries last)."""
        window = self._values
        valid = torch.isfinite(window)
        count = valid.sum(dim=1)
        low = ((count - 1).clamp(min=0) // 2).unsqueeze(1)
        high = (count // 2).clamp(max=self.window - 1).unsqueeze(1)

        def middle(rows: torch.Tensor) -> torch.Tensor:
            ordered = torch.where(valid, rows, math.inf).sort(dim=1).values
            return ((ordered.gather(1, low) + ordered.gather(1, high)) / 2).squeeze(1)

        median = middle(window)
        mad = middle((window - median.unsqueeze(1)).abs())
        scale = torch.maximum(1.4826 * mad, 1e-12 * median.abs()).clamp(min=_TINY)
        warm = count >= self.warmup
        z = torch.where(warm, (values - median) / scale, math.nan)
        spike = (
            warm & finite & self._judged & (z > self.spike_z) & (values > self.spike_ratio * median)
        )
        return torch.where(count > 0, median, math.nan), z, spike

    def _accept(self, fresh: torch.Tensor, accept: torch.Tensor) -> None:
        """Write ``fresh`` (NaN where absent or not finite) at the window's head when
        ``accept``; the head moves on only then."""
        where = self._head.view(1, 1).expand(len(SIGNALS), 1)
        current = self._values.gather(1, where).squeeze(1)
        self._values.scatter_(1, where, torch.where(accept, fresh, current).unsqueeze(1))
        self._head.add_(accept.long()).remainder_(self.window)

    def _undo(self, optimizer: torch.optim.Optimizer, tripped: torch.Tensor) -> None:
        """Where ``tripped``: parameters and optimizer state as they were before the step.
        State the step created (a first step) goes back to zeros, which is how Adam, AdamW and
        SGD (without dampening) start one."""
        host = bool(self.read_on_host)
        if host and not bool(tripped):
            return  # on the CPU reading the decision is no sync: a kept step costs no pass
        targets = [p.detach() for _, p in self._active]
        copies = [self._param_copies[i] for i, _ in self._active]
        before = {(i, key) for i, key, _ in self._state_before}
        for i, p in self._active:
            for key, value in optimizer.state.get(p, {}).items():
                if not isinstance(value, torch.Tensor) or value.device != self.device:
                    continue
                copy = self._state_copies.get((i, key)) if (i, key) in before else None
                if copy is None:
                    value.masked_fill_(tripped, 0)
                elif (copy.shape, copy.dtype) == (value.shape, value.dtype):
                    targets.append(value)
                    copies.append(copy)
        if host:  # tripped, read above: put everything back in one fused copy
            torch._foreach_copy_(targets, copies)
        elif self._compiled_select is not None:
            self._compiled_select(tripped, targets, copies)
        else:
            for target, copy in zip(targets, copies, strict=True):
                torch.where(tripped, copy, target, out=target)


__all__ = [
    "BITS",
    "GRAD_NORM",
    "LOSS",
    "MEDIAN",
    "SIGNALS",
    "SKIPPED",
    "UNDO_MODES",
    "UPDATE_NORM",
    "WIDTH",
    "Z",
]
