"""Statistics of tensors on an accelerator, at the cost of the kernels and one copy per step.

- Tensors saved together (every gradient of a step, every weight at its end) are reduced as a
  group: norms and maxima with PyTorch's multi-tensor ``_foreach`` kernels (a few launches for
  all tensors instead of several per tensor), reading bfloat16/float16 directly with float32
  accumulation; other statistics per tensor, sharing passes (``reduce_many``). A mean of absolute
  values is the l1 norm divided by the size, on the host.
- A step's 0-d results stay on the device. When the step ends they are stacked into one buffer
  per device, copied without blocking into pinned host memory on a side stream, and an event is
  recorded. The training thread never waits: the writer thread waits for the event before it
  writes the values (``Deferred``). Raw copies likewise: the writer waits for them, not the
  training thread.

On devices other than CUDA the step's buffer is copied synchronously when the step ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from tensortap.core._records import Record

_INF = float("inf")
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


Kernel = Callable[[list[torch.Tensor]], Sequence[torch.Tensor]]


def _norms(order: float) -> Kernel:
    return lambda ts: torch._foreach_norm(ts, order, dtype=_wide(ts))


def _maxima(ts: list[torch.Tensor]) -> Sequence[torch.Tensor]:
    return torch._foreach_max(ts)


def _foreach(spec: tuple[str, bool]) -> tuple[Kernel, bool] | None:
    """A multi-tensor kernel computing ``spec`` of each tensor of a list, and whether each
    result is then divided by its tensor's size (a mean); None where no such kernel exists."""
    name, on_abs = spec
    if name == "l2":
        return _norms(2), False
    if name == "l1" or (on_abs and name in ("sum", "mean")):
        return _norms(1), name == "mean"
    if name == "max" and on_abs:
        return _norms(_INF), False
    if name == "max" and hasattr(torch, "_foreach_max"):
        return _maxima, False
    return None


def _wide(tensors: list[torch.Tensor]) -> torch.dtype:
    return torch.float64 if tensors[0].dtype == torch.float64 else torch.float32


class Fence:
    """Work a device had queued when the fence was made; ``resolve`` waits for it (a Deferred
    of raw records, whose host copies arrive asynchronously)."""

    nbytes = 0

    def __init__(self, device: torch.device) -> None:
        self._event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        self._event.record(torch.cuda.current_stream(device))

    def resolve(self) -> None:
        self._event.synchronize()


class _Arrival:
    """One device's statistics of one step, arriving in pinned host memory (a Deferred)."""

    def __init__(
        self, items: list[tuple[Record, float]], host: torch.Tensor, event: Any | None
    ) -> None:
        self.items = items
        self.host = host
        self.event = event
        self.nbytes = host.numel() * host.element_size()

    def resolve(self) -> None:
        if self.event is not None:
            self.event.synchronize()
        for (rec, factor), value in zip(self.items, self.host.tolist(), strict=True):
            rec.value = float(value) * factor
            rec.deferred = None


class DeviceStatistics:
    """Collects a step's statistics on devices; :meth:`finish` sends them to the host."""

    def __init__(self, reduce_many: Any, as_reducible: Any) -> None:
        self._reduce_many = reduce_many
        self._as_reducible = as_reducible
        self._values: dict[torch.device, list[tuple[Record, torch.Tensor, float]]] = {}
        self._group: list[tuple[torch.Tensor, list[Record]]] | None = None
        self._side: dict[torch.device, Any] = {}

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """Tensors added inside are reduced as a group when the block ends (before the caller
        goes on, so later in-place changes of the tensors cannot reach the statistics)."""
        if self._group is not None:
            yield
            return
        self._group = []
        try:
            yield
        finally:
            group, self._group = self._group, None
            self._reduce_group(group)

    def add(self, t: torch.Tensor, records: list[Record]) -> None:
        """Queue the statistics of ``records`` (one per reduction) of ``t``."""
        if self._group is not None and t.dtype in _FLOATS:
            self._group.append((t, records))
            return
        specs = tuple((r.reduction, r.on_abs) for r in records)
        values = self._reduce_many(self._as_reducible(t), specs)
        out = self._values.setdefault(t.device, [])
        out.extend((r, v, 1.0) for r, v in zip(records, values, strict=True))

    def _reduce_group(self, group: list[tuple[torch.Tensor, list[Record]]]) -> None:
        by_kind: dict[tuple[Any, ...], list[tuple[torch.Tensor, list[Record]]]] = {}
        for t, records in group:
            specs = tuple((r.reduction, r.on_abs) for r in records)
            by_kind.setdefault((t.device, t.dtype, specs), []).append((t, records))
        for (device, _, specs), items in by_kind.items():
            out = self._values.setdefault(device, [])
            tensors = [t for t, _ in items]
            rest = tuple(i for i, s in enumerate(specs) if _foreach(s) is None)
            for i, spec in enumerate(specs):
                kernel = _foreach(spec)
                if kernel is None:
                    continue
                fn, mean = kernel
                for (t, records), value in zip(items, fn(tensors), strict=True):
                    out.append((records[i], value, 1.0 / t.numel() if mean else 1.0))
            if rest:
                rest_specs = tuple(specs[i] for i in rest)
                for t, records in items:
                    values = self._reduce_many(self._as_reducible(t), rest_specs)
                    out.extend((records[i], v, 1.0) for i, v in zip(rest, values, strict=True))

    def finish(self) -> None:
        """At step end: one buffer per device crosses to the host; CUDA without a wait."""
        values, self._values = self._values, {}
        for device, items in values.items():
            by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
            order: list[tuple[Record, float]] = []
            for dtype in dict.fromkeys(v.dtype for _, v, _ in items):
                for rec, v, factor in items:
                    if v.dtype == dtype:
                        by_dtype.setdefault(dtype, []).append(v.reshape(()))
                        order.append((rec, factor))
            wide = torch.float32 if device.type == "mps" else torch.float64
            buffer = torch.cat([torch.stack(vs).to(wide) for vs in by_dtype.values()])
            if device.type == "cuda":
                arrival = self._send_cuda(device, buffer, order)
            else:
                arrival = _Arrival(order, buffer.cpu(), None)
            for rec, _ in order:
                rec.deferred = arrival
            if device.type != "cuda":
                arrival.resolve()

    def _send_cuda(
        self, device: torch.device, buffer: torch.Tensor, order: list[tuple[Record, float]]
    ) -> _Arrival:
        side = self._side.get(device)
        if side is None:
            side = self._side[device] = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream(device))
        host = torch.empty(buffer.shape, dtype=buffer.dtype, pin_memory=True)
        with torch.cuda.stream(side):
            host.copy_(buffer, non_blocking=True)
            buffer.record_stream(side)
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record(side)
        return _Arrival(order, host, event)

    def discard(self) -> None:
        self._values.clear()
