"""torch tensors to records: reductions on the tensor's own device, one host copy of raw values.

Reductions are computed with torch where the tensor lives; their 0-d results stay on the device
until the step ends, when each device's results cross to the host in one transfer. Raw values of
CUDA tensors are copied into pinned host memory without blocking; the step waits for those copies
once, when it ends, before the writer sees them. CPU tensors are cloned once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tensortap.core.dtypes import dtype_info
from tensortap.core.recorder import SavePlan
from tensortap.core.records import Record, RecordKind
from tensortap.exceptions import InvalidTensorError


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
    v = x.abs() if on_abs else x
    if name == "min":
        return v.min()
    if name == "max":
        return v.max()
    if name == "mean":
        return v.mean()
    if name == "std":
        return v.std(correction=0)
    if name == "variance":
        return v.var(correction=0)
    if name == "sum":
        return v.sum()
    if name == "prod":
        return v.prod()
    if name == "l1":
        return torch.linalg.vector_norm(v, 1)  # type: ignore[no-any-return]
    if name == "l2":
        return torch.linalg.vector_norm(v, 2)  # type: ignore[no-any-return]
    raise InvalidTensorError(f"unknown reduction {name!r}")


class TorchConverter:
    """Turns torch tensors into records; values on a device are resolved at step end."""

    def __init__(self) -> None:
        self._pending: dict[torch.device, list[tuple[Record, torch.Tensor]]] = {}
        self._copy_devices: set[torch.device] = set()

    def records(self, name: str, tensor: torch.Tensor, plan: SavePlan) -> list[Record]:
        t = tensor.detach()
        if t.layout != torch.strided:
            t = t.to_dense()
        spec = _spec(t, name)
        shape = tuple(t.shape)
        out: list[Record] = []
        if plan.raw:
            out.append(
                Record(name, RecordKind.TENSOR, spec.stored, shape, self._host_copy(t, spec))
            )
        if plan.reductions:
            out.extend(self._reductions(name, t, spec, shape, plan))
        if plan.shape:
            out.append(Record(name, RecordKind.SHAPE, spec.stored, shape))
        return out

    def _host_copy(self, t: torch.Tensor, spec: _DtypeSpec) -> np.ndarray[Any, Any]:
        src = t.resolve_conj().resolve_neg()
        if spec.bits is not None:
            src = src.view(spec.bits)
        if src.device.type == "cpu":
            host = src.clone(memory_format=torch.contiguous_format)
        elif src.device.type == "cuda":
            host = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
            host.copy_(src, non_blocking=True)
            self._copy_devices.add(src.device)
        else:
            host = src.to("cpu")
        array = host.numpy()
        return array.view(spec.numpy_view) if spec.numpy_view is not None else array

    def _reductions(
        self, name: str, t: torch.Tensor, spec: _DtypeSpec, shape: tuple[int, ...], plan: SavePlan
    ) -> list[Record]:
        out = []
        x = _as_reducible(t) if t.numel() else t
        pending = self._pending.setdefault(t.device, []) if t.numel() else None
        for reduction, on_abs in plan.reductions:
            rec = Record(
                name, RecordKind.REDUCTION, spec.stored, shape, None, reduction, on_abs, _NAN
            )
            if pending is None:
                rec.value = _EMPTY.get(reduction, _NAN)
            else:
                pending.append((rec, reduce_tensor(x, reduction, on_abs)))
            out.append(rec)
        return out

    def resolve(self) -> None:
        """Bring this step's device values to the host (one transfer per device)."""
        for device in self._copy_devices:
            torch.cuda.current_stream(device).synchronize()
        self._copy_devices.clear()
        pending, self._pending = self._pending, {}
        for device, items in pending.items():
            if device.type == "cpu":
                values = [v.item() for _, v in items]
            else:
                wide = torch.float64 if device.type == "cuda" else torch.float32
                values = torch.stack([v.to(wide) for _, v in items]).cpu().tolist()
            for (rec, _), value in zip(items, values, strict=True):
                rec.value = float(value)

    def discard(self) -> None:
        self._pending.clear()
        self._copy_devices.clear()
