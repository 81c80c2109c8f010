"""Statistics of whole parameters and gradients sharded as DTensors (FSDP2, tensor parallel).

Each rank reduces only its local shard, into a few partial values per statistic (a sum and a
count for a mean, count/mean/M2 for a variance, a minimum, ...). When the step ends, every rank's
partials of the whole step cross in two collectives over the default process group (the row
counts, then the rows), and each rank combines the rows of the ranks holding the other shards of
the same tensor. Saved values are then those of the whole tensor, under its unsharded name.

Rows carry a fingerprint of their tensor and statistic, and are matched across ranks by it: a
statistic that a rank of its group did not save (a configuration that differs between ranks) is
NaN and reported, instead of a wrong combination. Ranks must still save the same *sharded
tensors with raw values* in the same order, as gathering them is a collective per tensor.

Raw values of a sharded tensor are gathered with ``DTensor.full_tensor()``, a collective per
tensor (every rank of its mesh takes part, in the same order, since each rank saves the same
tensors). A DTensor with a ``Partial`` placement (values still to be summed) is gathered whole.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

from tensortap.core._numerics import FORMATS
from tensortap.core._records import Record
from tensortap.exceptions import InvalidTensorError

try:
    from torch.distributed.tensor import DTensor
except ImportError:  # pragma: no cover - torch built without distributed
    DTensor = None  # type: ignore[assignment,misc]

_WIDTH = 4  # fingerprint + three partial values per statistic
_INF = float("inf")


def dtensor_kind(t: torch.Tensor) -> str:
    """``""`` for a plain tensor; ``replicated``, ``partial`` or ``sharded`` for a DTensor."""
    if DTensor is None or not isinstance(t, DTensor):
        return ""
    placements = t.placements
    if any(p.is_partial() for p in placements):
        return "partial"
    if any(p.is_shard() for p in placements):
        return "sharded"
    return "replicated"


def local_part(t: torch.Tensor) -> torch.Tensor:
    return t.to_local()  # type: ignore[attr-defined, no-any-return]


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor()  # type: ignore[attr-defined, no-any-return]


def _group(t: torch.Tensor) -> tuple[int, ...]:
    """The global ranks holding the shards of ``t`` that, together, make up the whole tensor."""
    mesh = t.device_mesh  # type: ignore[attr-defined]
    coordinate = mesh.get_coordinate()
    index: list[int | slice] = [
        slice(None) if p.is_shard() else coordinate[d]
        for d, p in enumerate(t.placements)  # type: ignore[attr-defined]
    ]
    return tuple(int(r) for r in mesh.mesh[tuple(index)].flatten().tolist())


def _partials(v: torch.Tensor, name: str, on_abs: bool) -> list[torch.Tensor | float]:
    """Three partial values of one statistic of the local shard ``v`` (reducible, 1-D)."""
    n = v.numel()
    if on_abs or name == "l1":
        v = v.abs()
    f64 = torch.float64
    if name in ("min", "max"):
        if n == 0:
            return [_INF if name == "min" else -_INF, 0.0, 0.0]
        return [v.min() if name == "min" else v.max(), 0.0, 0.0]
    if name in ("mean", "sum", "l1"):
        return [v.sum(dtype=f64), float(n), 0.0]
    if name in ("std", "variance"):
        if n == 0:
            return [0.0, 0.0, 0.0]
        mean = v.mean(dtype=f64)
        return [float(n), mean, (v.to(f64) - mean).square().sum()]
    if name == "prod":
        return [v.to(f64).prod(), 0.0, 0.0]
    if name == "l2":
        return [v.to(f64).square().sum(), 0.0, 0.0]
    finite = torch.isfinite(v)
    if name == "nonfinite":
        return [(~finite).sum().to(f64), 0.0, 0.0]
    magnitude = torch.where(finite, v.abs(), torch.zeros((), dtype=v.dtype, device=v.device))
    if name in ("amax", "dynamic_range"):
        if n == 0:
            return [0.0, _INF, 0.0]
        smallest = torch.where(magnitude > 0, magnitude, torch.full_like(magnitude, _INF)).min()
        return [magnitude.max(), smallest, 0.0]
    kind, _, fmt = name.partition("_")
    limits = FORMATS.get(fmt)
    if limits is None or kind not in ("underflow", "overflow"):
        raise InvalidTensorError(f"unknown reduction {name!r}")
    if kind == "underflow":
        hit = (magnitude > 0) & (magnitude < limits.smallest_normal)
    else:
        hit = magnitude > limits.largest
    return [hit.sum().to(f64), float(n), 0.0]


def _combine(name: str, rows: np.ndarray) -> float:
    """The statistic of the whole tensor from its shards' partial values (``rows``: [G, 3])."""
    a, b, c = rows[:, 0], rows[:, 1], rows[:, 2]
    if name == "min":
        return float(np.minimum.reduce(a))
    if name == "max":
        return float(np.maximum.reduce(a))
    if name == "mean":
        return float(a.sum() / b.sum()) if b.sum() else float("nan")
    if name in ("sum", "l1", "nonfinite"):
        return float(a.sum())
    if name in ("std", "variance"):
        total = a.sum()
        if not total:
            return float("nan")
        mean = float((a * b).sum() / total)
        m2 = float(c.sum() + (a * (b - mean) ** 2).sum())
        variance = m2 / total
        return variance if name == "variance" else float(np.sqrt(variance))
    if name == "prod":
        return float(np.prod(a))
    if name == "l2":
        return float(np.sqrt(a.sum()))
    if name == "amax":
        return float(a.max())
    if name == "dynamic_range":
        top, bottom = float(a.max()), float(b.min())
        return float(np.log2(top) - np.log2(bottom)) if bottom < _INF else 0.0
    return float(a.sum() / b.sum()) if b.sum() else 0.0  # underflow_* / overflow_*


def _fingerprint(name: str, reduction: str, on_abs: bool) -> float:
    return float(zlib.crc32(f"{name}\0{reduction}\0{int(on_abs)}".encode()))


@dataclass
class _Pending:
    record: Record
    fingerprint: float
    group: tuple[int, ...]
    values: list[torch.Tensor | float]


@dataclass
class ShardedStatistics:
    """This step's partial statistics of sharded tensors, combined across ranks at step end."""

    _pending: list[_Pending] = field(default_factory=list)
    _device: torch.device | None = None
    _armed: bool = False

    def arm(self) -> None:
        """A sharded tensor was planned this step: the exchange runs at step end, whatever
        happens to its computation (every rank must take part in the collectives)."""
        self._armed = True

    def add(self, local: torch.Tensor, whole: torch.Tensor, records: list[Record]) -> None:
        """Queue the partials of each record's statistic of ``local`` (``whole``'s shard)."""
        group = _group(whole)
        v = local.reshape(-1)
        if self._device is None:
            self._device = local.device
        for rec in records:
            fingerprint = _fingerprint(rec.name, rec.reduction, rec.on_abs)
            partials = _partials(v, rec.reduction, rec.on_abs)
            self._pending.append(_Pending(rec, fingerprint, group, partials))

    def exchange(self) -> list[str]:
        """Fill the queued records with whole-tensor values; returns the names whose ranks did
        not agree (their values are NaN). Collective: every rank calls it when armed."""
        if not self._armed:
            return []
        pending, self._pending, self._armed = self._pending, [], False
        device = self._device or torch.device("cpu")
        if dist.get_backend() == "nccl" and device.type != "cuda":
            device = torch.device("cuda", torch.cuda.current_device())
        self._device = None
        rows = torch.zeros((len(pending), _WIDTH), dtype=torch.float64, device=device)
        if pending:
            cells = [
                torch.as_tensor(x, dtype=torch.float64, device=device).reshape(())
                for p in pending
                for x in (p.fingerprint, *p.values)
            ]
            rows = torch.stack(cells).reshape(len(pending), _WIDTH)
        world = dist.get_world_size()
        counts = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
        dist.all_gather(counts, torch.tensor([len(pending)], dtype=torch.int64, device=device))
        most = max(int(c.item()) for c in counts)
        padded = torch.full((most, _WIDTH), float("nan"), dtype=torch.float64, device=device)
        padded[: len(pending)] = rows
        gathered = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(gathered, padded)
        table = np.stack([g.cpu().numpy() for g in gathered])  # [world, most, width]
        return _fill(pending, table)


def _fill(pending: list[_Pending], table: np.ndarray) -> list[str]:
    """Combine each pending record's rows across its group, found in each rank's rows by
    fingerprint (ranks that saved different things still combine what they share)."""
    where = [{float(f): j for j, f in enumerate(rank_rows[:, 0])} for rank_rows in table]
    mismatched: list[str] = []
    for p in pending:
        found = [where[r].get(p.fingerprint) for r in p.group]
        if any(j is None for j in found):
            p.record.value = float("nan")
            mismatched.append(p.record.name)
            continue
        rows = np.stack([table[r, j, 1:] for r, j in zip(p.group, found, strict=True)])
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: NaN, as torch gives
            p.record.value = _combine(p.record.reduction, rows)
    return sorted(set(mismatched))
