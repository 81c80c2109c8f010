"""torch tensors to records: reductions on the tensor's own device, one host copy of raw values.

Reductions are computed with torch where the tensor lives. On a GPU their 0-d results stay on the
device until the step ends, when each device's results cross to the host in one transfer. On the
CPU the training thread only copies the tensor (once, shared with the raw copy when one is
saved); the writer thread computes the reductions from that copy, beside training.
Raw values of CUDA tensors are copied into pinned host memory without blocking; the step waits
for those copies once, when it ends, before the writer sees them. CPU tensors are cloned once.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tensortap.core._dtypes import dtype_info
from tensortap.core._numerics import NUMERICS_REDUCTIONS
from tensortap.core._recorder import SavePlan
from tensortap.core._records import Record, RecordKind
from tensortap.exceptions import InvalidTensorError, TensortapError
from tensortap.pytorch._device_stats import DeviceStatistics, Fence
from tensortap.pytorch._numerics import TensorNumerics
from tensortap.pytorch._sharded import ShardedStatistics, dtensor_kind, full_tensor, local_part
from tensortap.pytorch._slots import SlotStatistics, counted_here


class ShardMismatchError(TensortapError):
    """Ranks did not save the same sharded tensors in a step, so their shards cannot combine."""


@dataclass(frozen=True, slots=True)
class _DtypeSpec:
    stored: str  # the on-disk dtype name
    bits: torch.dtype | None  # view as this integer type to copy the raw bits
    numpy_view: np.dtype[Any] | None  # then view the NumPy array as this


def _numpy_spec(np_dtype: Any) -> _DtypeSpec:
    return _DtypeSpec(dtype_info(np.dtype(np_dtype)).stored_name, None, None)


def _build_specs() -> dict[torch.dtype, _DtypeSpec]:
    specs = {
        torch.float16: _numpy_spec(np.float16),
        torch.float32: _numpy_spec(np.float32),
        torch.float64: _numpy_spec(np.float64),
        torch.complex64: _numpy_spec(np.complex64),
        torch.complex128: _numpy_spec(np.complex128),
        torch.bool: _numpy_spec(np.bool_),
        torch.uint8: _numpy_spec(np.uint8),
        torch.int8: _numpy_spec(np.int8),
        torch.int16: _numpy_spec(np.int16),
        torch.int32: _numpy_spec(np.int32),
        torch.int64: _numpy_spec(np.int64),
        torch.bfloat16: _DtypeSpec("bfloat16", torch.int16, np.dtype(np.uint16)),
    }
    for name, np_dtype in (("uint16", np.uint16), ("uint32", np.uint32), ("uint64", np.uint64)):
        dtype = getattr(torch, name, None)
        if dtype is not None:
            specs[dtype] = _numpy_spec(np_dtype)
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
        dtype = getattr(torch, name, None)
        if dtype is not None:
            specs[dtype] = _DtypeSpec(name, torch.uint8, None)
    return specs


_SPECS = _build_specs()
_LOW_PRECISION = frozenset(d for d in _SPECS if d.is_floating_point and d.itemsize < 4)
_NAN = float("nan")
_F64 = ("cpu", "cuda")  # device types with float64 kernels
_EMPTY = {"sum": 0.0, "prod": 1.0, "l1": 0.0, "l2": 0.0}


def _spec(tensor: torch.Tensor, name: str) -> _DtypeSpec:
    spec = _SPECS.get(tensor.dtype)
    if spec is None:
        raise InvalidTensorError(
            f"tensor {name!r} has dtype {tensor.dtype}, which tensortap cannot save; supported: "
            "bool, integers, float16/32/64, bfloat16, float8, complex64/128. Convert it first"
        )
    return spec


def _as_reducible(x: torch.Tensor) -> torch.Tensor:
    if x.is_complex():
        return x.abs()
    if not x.is_floating_point():
        return x.to(torch.float64 if x.device.type in ("cpu", "cuda") else torch.float32)
    if x.dtype in _LOW_PRECISION:
        return x.float()
    return x


def reduce_tensor(x: torch.Tensor, name: str, on_abs: bool) -> torch.Tensor:
    """One reduction or norm as a 0-d tensor on ``x``'s device (same meaning as the core's)."""
    return reduce_many(x, ((name, on_abs),))[0]


def reduce_many(x: torch.Tensor, specs: tuple[tuple[str, bool], ...]) -> list[torch.Tensor]:
    """Reductions and norms of ``x`` (reducible: see ``_as_reducible``), each a 0-d tensor.

    Shares passes over the data: one ``aminmax`` for min and max, one ``abs`` for everything on
    the absolute value and the l1 norm. ``torch.linalg.vector_norm(x, 1)`` is avoided: on the CPU
    it is several times slower than ``abs().sum()``.
    """
    absolute: torch.Tensor | None = None
    extremes: dict[bool, tuple[torch.Tensor, torch.Tensor]] = {}
    numerics: TensorNumerics | None = None
    out = []
    for name, on_abs in specs:
        if name in NUMERICS_REDUCTIONS:
            numerics = numerics or TensorNumerics(x)
            out.append(numerics.get(name))
            continue
        if (on_abs or name == "l1") and absolute is None:
            absolute = x.abs()
        v = absolute if on_abs and absolute is not None else x
        if name in ("min", "max"):
            if on_abs not in extremes:
                extremes[on_abs] = torch.aminmax(v)
            out.append(extremes[on_abs][0 if name == "min" else 1])
        elif name == "mean":
            out.append(v.mean())
        elif name == "std":
            out.append(v.std(correction=0))
        elif name == "variance":
            out.append(v.var(correction=0))
        elif name == "sum":
            out.append(v.sum())
        elif name == "prod":  # float64 where there is one: a product overflows float32 soon
            out.append(v.prod(dtype=torch.float64) if v.device.type in _F64 else v.prod())
        elif name == "l1" and absolute is not None:
            out.append(absolute.sum())
        elif name == "l2":
            out.append(torch.linalg.vector_norm(v, 2))
        else:
            raise InvalidTensorError(f"unknown reduction {name!r}")
    return out


class _BufferPool:
    """Reused CPU buffers for snapshots: fresh large allocations cost page faults every step."""

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self._free: dict[tuple[torch.dtype, tuple[int, ...]], list[torch.Tensor]] = {}
        self._bytes = 0
        self._max_bytes = max_bytes
        self._lock = threading.Lock()

    def copy(self, t: torch.Tensor) -> torch.Tensor:
        with self._lock:
            free = self._free.get((t.dtype, tuple(t.shape)))
            buf = free.pop() if free else None
            if buf is not None:
                self._bytes -= buf.numel() * buf.element_size()
        if buf is None:
            return t.clone(memory_format=torch.contiguous_format)
        return buf.copy_(t)

    def give_back(self, buf: torch.Tensor) -> None:
        size = buf.numel() * buf.element_size()
        with self._lock:
            if self._bytes + size <= self._max_bytes:
                self._free.setdefault((buf.dtype, tuple(buf.shape)), []).append(buf)
                self._bytes += size


class _RawPool:
    """Host buffers for the raw copies of CPU tensors, each reused once the array handed to the
    writer is gone (the writer drops a step after writing it; whatever still holds the array or
    a view of it keeps the buffer from reuse). A fresh allocation costs the training thread page
    faults and zeroing on top of the copy: about twice the copy alone.

    A buffer goes back to its shape's free queue when its array dies (a weakref callback, on
    whichever thread drops it), so taking one costs the same however many are lent: a scan of
    the lent buffers for a free one cost about 68 us a copy with ~500 of one shape in flight
    (every tensor of a small model saved each step, the writer a few steps behind).

    Only the training thread (under the hook's lock) takes buffers; arrays die on any thread
    (``deque.append``/``popleft`` and a dict's item set and ``pop`` are atomic).
    """

    def __init__(self, max_bytes: int = 128 << 20) -> None:
        self._free: dict[tuple[torch.dtype, tuple[int, ...]], collections.deque[torch.Tensor]] = {}
        # the weakrefs watching lent arrays, by id (an array is unhashable, so is its weakref),
        # each with its buffer and the free queue it goes back to
        self._watching: dict[
            int,
            tuple[weakref.ref[np.ndarray[Any, Any]], torch.Tensor, collections.deque[torch.Tensor]],
        ] = {}
        self._bytes = 0
        self._max_bytes = max_bytes
        self._returned_cb = self._returned  # one bound method, not one a lend

    def copy(self, src: torch.Tensor) -> tuple[torch.Tensor, np.ndarray[Any, Any]]:
        """A contiguous copy of ``src`` and the array over it (to hand to the writer)."""
        key = (src.dtype, src.shape)  # a torch.Size is a tuple
        free = self._free.get(key)
        if free:
            try:
                buf = free.popleft()
            except IndexError:  # emptied meanwhile: cannot happen with one taker, but cheap
                buf = None
            if buf is not None:
                buf.copy_(src)
                return buf, self._lend(buf, free)
        buf = src.clone(memory_format=torch.contiguous_format)
        size = buf.numel() * buf.element_size()
        if self._bytes + size > self._max_bytes:
            return buf, buf.numpy()  # not kept: freed with its array
        self._bytes += size
        if free is None:
            free = self._free[key] = collections.deque()
        return buf, self._lend(buf, free)

    def lent(self) -> int:
        """Buffers whose array is still alive (for tests)."""
        return len(self._watching)

    def _lend(
        self, buf: torch.Tensor, free: collections.deque[torch.Tensor]
    ) -> np.ndarray[Any, Any]:
        array = buf.numpy()
        ref = weakref.ref(array, self._returned_cb)
        self._watching[id(ref)] = (ref, buf, free)
        return array

    def _returned(self, ref: weakref.ref[np.ndarray[Any, Any]]) -> None:
        """A lent array died: its buffer goes back to its free queue."""
        entry = self._watching.pop(id(ref), None)
        if entry is not None:
            entry[2].append(entry[1])


class _CpuReductions:
    """Reductions of a CPU tensor, computed by the writer thread from a private copy.

    The training thread pays one copy of the tensor; the passes over the data run beside it.
    """

    def __init__(
        self,
        tensor: torch.Tensor,
        specs: tuple[tuple[str, bool], ...],
        records: list[Record],
        pool: _BufferPool | None,
    ) -> None:
        self.tensor: torch.Tensor | None = tensor
        self.specs = specs
        self.records = records
        self.pool = pool
        self.nbytes = tensor.numel() * tensor.element_size()

    def resolve(self) -> None:
        tensor, self.tensor = self.tensor, None
        if tensor is None:
            return
        try:
            values = reduce_many(_as_reducible(tensor), self.specs)
            for rec, value in zip(self.records, values, strict=True):
                rec.value = value.item()
        finally:
            for rec in self.records:
                rec.deferred = None
            if self.pool is not None:
                self.pool.give_back(tensor)


class TorchConverter:
    """Turns torch tensors into records; values on a device are resolved at step end."""

    def __init__(self, slots: SlotStatistics | None = None) -> None:
        self._device_stats = DeviceStatistics(reduce_many, _as_reducible)
        self._slots = slots  # statistics="slots": derivable reductions come from the slots
        self._replicated = False  # inside together(replicated=True)
        self._raw_copies: dict[torch.device, list[Record]] = {}
        self._pool = _BufferPool()
        self._raw_pool = _RawPool()
        # this step's raw copies of CPU tensors, by the id of the tensor saved: a tensor saved
        # again unchanged (a module's output is the next one's input) shares its copy. The
        # tensor is held, so its id is not reused; an in-place change bumps its version.
        self._copied: dict[int, tuple[torch.Tensor, int, np.ndarray[Any, Any]]] = {}
        self._sharded = ShardedStatistics()
        self._cpu_as_device = False  # tests: CPU tensors take the accelerator path

    @contextlib.contextmanager
    def together(self, replicated: bool = False) -> Iterator[None]:
        """Tensors saved inside the block have their statistics computed as a group (multi-
        tensor kernels on accelerators) when it ends: wrap saves of many tensors at once.
        ``replicated``: they are parameters or gradients, the same on every rank under DDP
        (merged slots count them once)."""
        before, self._replicated = self._replicated, replicated or self._replicated
        try:
            with self._device_stats.together():
                if self._slots is None:
                    yield
                else:
                    with self._slots.together():
                        yield
        finally:
            self._replicated = before

    def records(self, name: str, tensor: torch.Tensor, plan: SavePlan) -> list[Record]:
        t = tensor.detach()
        kind = dtensor_kind(t)
        if kind == "sharded":
            return self._sharded_records(name, t, plan)
        if kind:
            t = local_part(t) if kind == "replicated" else full_tensor(t)
        if t.layout != torch.strided:
            t = t.to_dense()
        spec = _spec(t, name)
        shape = tuple(t.shape)
        out: list[Record] = []
        host: torch.Tensor | None = None
        if plan.raw and not plan.reductions and t.device.type == "cpu":
            array = self._cpu_copy(tensor, t, spec)
            out.append(Record(name, RecordKind.TENSOR, spec.stored, shape, array))
        elif plan.raw:
            # the copy is reused once written, unless the writer reduces it too (it holds it)
            host, array = self._host_copy(t, spec, pooled=not plan.reductions)
            out.append(Record(name, RecordKind.TENSOR, spec.stored, shape, array))
            if t.device.type == "cuda":  # its copy arrives later: the writer waits for it
                self._raw_copies.setdefault(t.device, []).append(out[-1])
        if plan.reductions:
            out.extend(self._reductions(name, t, host, spec, shape, plan))
        if plan.shape:
            out.append(Record(name, RecordKind.SHAPE, spec.stored, shape))
        return out

    def _cpu_copy(
        self, tensor: torch.Tensor, t: torch.Tensor, spec: _DtypeSpec
    ) -> np.ndarray[Any, Any]:
        """The raw copy of CPU tensor ``t`` (``tensor`` detached), from the pool, or the one
        taken earlier this step when ``tensor`` was saved unchanged before."""
        if tensor.is_inference():  # keeps no version counter
            return self._host_copy(t, spec, pooled=True)[1]
        seen = self._copied.get(id(tensor))
        version = tensor._version
        if seen is not None and seen[0] is tensor and seen[1] == version:
            return seen[2]
        array = self._host_copy(t, spec, pooled=True)[1]
        self._copied[id(tensor)] = (tensor, version, array)
        return array

    def _sharded_records(self, name: str, t: torch.Tensor, plan: SavePlan) -> list[Record]:
        """A DTensor sharded across ranks: raw values gathered, statistics of the whole tensor
        combined across ranks when the step ends (see ``tensortap.pytorch._sharded``)."""
        slots = self._slots is not None and self._slots.takes(t, plan.reductions)
        if plan.reductions and t.numel() and not slots:
            self._sharded.arm()  # before anything that can fail: every rank must exchange
        spec = _spec(t, name)
        shape = tuple(t.shape)
        out: list[Record] = []
        if plan.raw:
            _, array = self._host_copy(full_tensor(t), spec)
            out.append(Record(name, RecordKind.TENSOR, spec.stored, shape, array))
        if plan.reductions:
            stats = [
                Record(name, RecordKind.REDUCTION, spec.stored, shape, None, red, on_abs, _NAN)
                for red, on_abs in plan.reductions
            ]
            if t.numel() and self._slots is not None and slots:
                self._slots.add(name, local_part(t), stats, counted_here(t, True))
            elif t.numel():
                self._sharded.add(_as_reducible(local_part(t)), t, stats)
            else:
                for rec in stats:
                    rec.value = _EMPTY.get(rec.reduction, _NAN)
            out.extend(stats)
        if plan.shape:
            out.append(Record(name, RecordKind.SHAPE, spec.stored, shape))
        return out

    def _host_copy(
        self, t: torch.Tensor, spec: _DtypeSpec, pooled: bool = False
    ) -> tuple[torch.Tensor | None, np.ndarray[Any, Any]]:
        """Copy to the host; also returns the copy as a CPU tensor of t's dtype, if there is one
        (not for a ``pooled`` copy, whose buffer is reused once its array is gone)."""
        src = t.resolve_conj().resolve_neg()
        if spec.bits is not None:
            src = src.view(spec.bits)
        values: torch.Tensor | None = None
        if src.device.type == "cpu" and pooled:
            _, array = self._raw_pool.copy(src)
            return None, array if spec.numpy_view is None else array.view(spec.numpy_view)
        if src.device.type == "cpu":
            host = src.clone(memory_format=torch.contiguous_format)
            values = host if spec.bits is None else host.view(t.dtype)
        elif src.device.type == "cuda":
            host = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
            host.copy_(src, non_blocking=True)
        else:
            host = src.to("cpu")
        array = host.numpy()
        if spec.numpy_view is not None:
            array = array.view(spec.numpy_view)
        return values, array

    def _reductions(
        self,
        name: str,
        t: torch.Tensor,
        host: torch.Tensor | None,
        spec: _DtypeSpec,
        shape: tuple[int, ...],
        plan: SavePlan,
    ) -> list[Record]:
        out = [
            Record(name, RecordKind.REDUCTION, spec.stored, shape, None, red, on_abs, _NAN)
            for red, on_abs in plan.reductions
        ]
        if self._slots is not None and self._slots.takes(t, plan.reductions):
            counted = counted_here(t, self._replicated)
            self._slots.add(name, t, out, counted, accumulate=not self._replicated)
        elif t.numel() == 0:
            for rec in out:
                rec.value = _EMPTY.get(rec.reduction, _NAN)
        elif t.device.type == "cpu" and not self._cpu_as_device:
            # A private copy (the raw copy when there is one) is reduced by the writer thread.
            if host is not None:
                deferred = _CpuReductions(host, plan.reductions, out, None)
            else:
                deferred = _CpuReductions(self._pool.copy(t), plan.reductions, out, self._pool)
            for rec in out:
                rec.deferred = deferred
        else:
            self._device_stats.add(t, out)
        return out

    def resolve(self) -> None:
        """Bring this step's device values to the host (one transfer per device), and combine
        the statistics of sharded tensors across ranks (collective when any were saved)."""
        self._copied.clear()
        try:
            copies, self._raw_copies = self._raw_copies, {}
            for device, records in copies.items():
                fence = Fence(device)
                for rec in records:
                    rec.deferred = fence
            self._device_stats.finish()
        finally:
            try:
                if self._slots is not None:
                    self._slots.finish()  # one SUM and one MAX all-reduce under distributed
            finally:
                mismatched = self._sharded.exchange()  # even after a failure: ranks wait on it
        if mismatched:
            raise ShardMismatchError(
                f"ranks saved different sharded statistics this step (for {mismatched[:5]}); "
                "their values are NaN. Give every rank the same hook configuration"
            )

    def discard(self) -> None:
        self._copied.clear()
        self._device_stats.discard()
        self._raw_copies.clear()
        try:
            if self._slots is not None:
                self._slots.discard()
        finally:
            self._sharded.exchange()  # the other ranks take part in it: never leave them waiting
