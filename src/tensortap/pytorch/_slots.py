"""Fixed-slot statistics: one row of mergeable sufficient statistics per saved tensor.

With ``Hook(..., statistics="slots")`` every statistic the hook saves of a floating-point tensor
(weights, gradients, module inputs and outputs, the gradients of module outputs) comes from one
row of fixed slots, written on the tensor's device into one preallocated ``[rows, SLOTS]``
buffer:

=========  =====================================================  ==============
slot       what                                                   across ranks
=========  =====================================================  ==============
numel      number of values                                       sum
nonfinite  NaN and infinite values                                sum
zeros      values equal to 0                                      sum
sum        sum of x                                               sum
sum_abs    sum of ``|x|`` (the l1 norm)                           sum
sum_sq     sum of x² (the l2 norm squared)                        sum
sum_4th    sum of x⁴                                              sum
max_abs    largest ``|x|``                                        max
max        largest x                                              max
neg_min    minus the smallest x                                   max
=========  =====================================================  ==============

On CUDA each tensor's row is one compiled function (one fused pass); elsewhere multi-tensor
kernels over each group of tensors saved together (``torch._foreach_norm`` of orders 0 and 1)
and per tensor one ``aminmax``, ``sum``, ``isfinite`` count and two dot products (Σx², Σx⁴);
accumulated in float32 (float64 on the CPU and for float64 tensors). Under
``torch.distributed`` the whole buffer is merged with **one SUM all-reduce and one MAX
all-reduce per saving step**, for every tensor at once; then it is copied to the host without
blocking (CUDA: pinned memory, ``non_blocking=True`` and an event the writer thread waits
for) and the writer thread turns each row into the saved reductions. Nothing on the training
thread reads a value.

Merging is by kind of tensor: a tensor of per-rank data (activations, their gradients) adds up
over the ranks (the statistics of the union of every rank's data); a shard of a DTensor (FSDP2)
adds up over the ranks holding the other shards; a replicated tensor (a plain parameter or
gradient under DDP, a replicated DTensor dimension) is counted once, from the first rank holding
it. Every rank then saves the same merged numbers.

What the slots give (:data:`DERIVABLE`): min, max, mean, sum, std, variance, l1, l2 and
nonfinite of the tensor, and max, mean, sum, std, variance, l1, l2 of its absolute value.
Not derivable, so refused at setup: prod, the absolute minimum and product, and the numerics
statistics other than nonfinite (amax, dynamic_range, underflow_*, overflow_*). ``std`` and
``variance`` are ``E[x²] - E[x]²``: where ``|mean|`` is far above ``std`` (a LayerNorm weight
near 1) they lose the digits float32 accumulation cannot hold; the per-tensor path computes them
in two passes.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from tensortap.core._recorder import StepRecorder
from tensortap.core._records import Record
from tensortap.exceptions import InvalidConfigError
from tensortap.pytorch._device_stats import Fence
from tensortap.pytorch._sharded import dtensor_kind

SLOTS = (
    "numel",
    "nonfinite",
    "zeros",
    "sum",
    "sum_abs",
    "sum_sq",
    "sum_4th",
    "max_abs",
    "max",
    "neg_min",
)
#: Slots ``[0, SUMMED)`` add up across ranks; the others take the maximum.
SUMMED = 7
NUMEL, NONFINITE, ZEROS, SUM, SUM_ABS, SUM_SQ, SUM_4TH, MAX_ABS, MAX, NEG_MIN = range(len(SLOTS))

#: (reduction, on the absolute value) pairs the slots give exactly.
DERIVABLE = frozenset(
    [
        *((name, False) for name in ("min", "max", "mean", "std", "variance", "sum")),
        *((name, False) for name in ("l1", "l2", "nonfinite")),
        *((name, True) for name in ("max", "mean", "std", "variance", "sum", "l1", "l2")),
    ]
)
#: The collection of the gradients of saved module outputs (``gradient/<output name>``).
ACTIVATION_GRADIENTS = "activation_gradients"
STATISTICS_CHOICES = ("per_tensor", "slots")
logger = logging.getLogger(__name__)
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_INF = float("inf")


def check_statistics(statistics: object) -> str:
    """The ``statistics`` option of the hook, validated."""
    if statistics not in STATISTICS_CHOICES:
        raise InvalidConfigError(
            f"statistics must be one of {', '.join(map(repr, STATISTICS_CHOICES))}, got "
            f"{statistics!r}: 'per_tensor' computes each reduction of each tensor (the default), "
            "'slots' one row of mergeable statistics per tensor"
        )
    return str(statistics)


def not_derivable(specs: tuple[tuple[str, bool], ...]) -> list[str]:
    """The reductions of ``specs`` the slots cannot give (``abs_`` marks absolute ones)."""
    return [
        ("abs_" if on_abs else "") + name
        for name, on_abs in specs
        if (name, on_abs) not in DERIVABLE
    ]


def refuse_not_derivable(where: str, specs: tuple[tuple[str, bool], ...]) -> None:
    """Setup check: every reduction asked for must come from the slots."""
    missing = not_derivable(specs)
    if missing:
        raise InvalidConfigError(
            f"statistics='slots' cannot compute {missing} (asked for by {where}): the slots give "
            "min, max, mean, sum, std, variance, l1, l2 and nonfinite, and max, mean, sum, std, "
            "variance, l1 and l2 of the absolute value. Leave those reductions out, or use "
            "statistics='per_tensor' for this hook"
        )


def refuse_collections(recorder: StepRecorder) -> None:
    """Setup check of the included collections' own reduction configs (see above)."""
    for name in sorted(recorder.include_collections):
        config = recorder.collections.get(name).reduction_config
        if config is not None:
            refuse_not_derivable(f"collection {name!r}", config.reduction_specs)


def derive(row: np.ndarray[Any, Any], name: str, on_abs: bool) -> float:
    """One reduction of a tensor from its (merged) row of slots, as the core computes it."""
    n = float(row[NUMEL])
    if n == 0:
        return {"sum": 0.0, "l1": 0.0, "l2": 0.0, "nonfinite": 0.0}.get(name, math.nan)
    with np.errstate(all="ignore"):
        if name == "nonfinite":
            return float(row[NONFINITE])
        if name == "l1":
            return float(row[SUM_ABS])
        if name == "l2":
            return float(np.sqrt(row[SUM_SQ]))
        total = row[SUM_ABS] if on_abs else row[SUM]
        if name == "sum":
            return float(total)
        if name == "mean":
            return float(total / n)
        if name in ("std", "variance"):
            mean = total / n
            variance = row[SUM_SQ] / n - mean * mean
            if np.isfinite(variance):
                variance = max(float(variance), 0.0)
            return float(variance if name == "variance" else np.sqrt(variance))
        if name == "max":
            return float(row[MAX_ABS] if on_abs else row[MAX])
        if name == "min" and not on_abs:
            return float(-row[NEG_MIN])
    raise InvalidConfigError(f"the slots cannot give {'abs ' if on_abs else ''}{name!r}")


def _accumulator(t: torch.Tensor) -> torch.dtype:
    if t.dtype == torch.float64 or t.device.type == "cpu":
        return torch.float64
    return torch.float32


def row_of(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The slots of ``x`` as one row, accumulated in ``dtype``. Traced by Dynamo (inside a
    compiled model, or compiled by itself), its reductions fuse into one pass over ``x``."""
    x = x.detach().to(dtype)
    low, high = torch.aminmax(x)
    n = torch.full((), x.numel(), dtype=dtype, device=x.device)
    square = x * x
    return torch.stack(
        [
            n,
            n - torch.isfinite(x).sum().to(dtype),
            n - torch.linalg.vector_norm(x, 0),
            x.sum(),
            x.abs().sum(),
            square.sum(),
            (square * square).sum(),
            torch.maximum(high.abs(), low.abs()),
            high,
            -low,
        ]
    )


KERNELS = ("auto", "foreach", "compiled")
_compiled_row: Any = None
_compiled_failed = False


def _fused_rows(tensors: list[torch.Tensor], acc: torch.dtype) -> torch.Tensor | None:
    """Each tensor's row by one compiled function (one fused pass per tensor, the size
    symbolic so one graph serves every shape); None where compiling is not possible."""
    global _compiled_row, _compiled_failed
    if _compiled_failed or torch.compiler.is_compiling():
        return None
    try:
        if _compiled_row is None:
            _compiled_row = torch.compile(row_of, dynamic=True, fullgraph=True)
        return torch.stack([_compiled_row(t.reshape(-1), acc) for t in tensors])
    except Exception:  # no working compiler here (e.g. no triton): the foreach kernels
        _compiled_failed = True
        logger.warning("tensortap: slot statistics fall back to foreach kernels", exc_info=True)
        return None


def slot_rows(
    tensors: list[torch.Tensor],
    numels: dict[Any, torch.Tensor] | None = None,
    kernel: str = "auto",
) -> torch.Tensor:
    """``[len(tensors), SLOTS]``: see :func:`_slot_rows`; outside autocast and autograd (the
    hook computes rows inside a model's forward, too)."""
    device = tensors[0].device.type
    plain = torch.autocast(device, enabled=False) if device in ("cpu", "cuda") else None
    with torch.no_grad(), plain or contextlib.nullcontext():
        return _slot_rows(tensors, numels, kernel)


def _slot_rows(
    tensors: list[torch.Tensor],
    numels: dict[Any, torch.Tensor] | None = None,
    kernel: str = "auto",
) -> torch.Tensor:
    """``[len(tensors), SLOTS]`` rows of slots of non-empty floating tensors of one device and
    dtype. ``kernel``: ``foreach``: multi-tensor norms of orders 0 and 1, and per tensor one
    ``aminmax``, ``sum``, finite count and two dot products (about eight passes over the
    data); ``compiled``: one fused pass per tensor (``row_of`` compiled); ``auto``: compiled
    on CUDA, foreach elsewhere. ``numels`` caches the sizes as device tensors (made once per
    set of shapes, no copy)."""
    acc = _accumulator(tensors[0])
    device = tensors[0].device
    if kernel == "compiled" or (kernel == "auto" and device.type == "cuda"):
        fused = _fused_rows(tensors, acc)
        if fused is not None:
            return fused
    key = (device, acc, tuple(t.numel() for t in tensors))
    numel = None if numels is None else numels.get(key)
    if numel is None:
        numel = torch.stack([torch.full((), float(n), dtype=acc, device=device) for n in key[2]])
        if numels is not None:
            numels[key] = numel
    nnz, l1 = (torch.stack(torch._foreach_norm(tensors, order, dtype=acc)) for order in (0, 1))
    # Σx² and Σx⁴ as dot products of the widened values (BLAS; the norms of orders 2 and 4
    # would round through a square root, and order 4 has no fast kernel)
    squares, fourths = [], []
    for t in tensors:
        x = t.reshape(-1).to(acc)
        square = x * x
        squares.append(torch.dot(x, x))
        fourths.append(torch.dot(square, square))
    extremes = [torch.aminmax(t) for t in tensors]
    low = torch.stack([lo for lo, _ in extremes]).to(acc)
    high = torch.stack([hi for _, hi in extremes]).to(acc)
    sums = torch.stack([t.sum(dtype=acc) for t in tensors])
    finite = torch.stack([torch.isfinite(t).sum() for t in tensors]).to(acc)
    columns = [
        numel,
        numel - finite,
        numel - nnz,
        sums,
        l1,
        torch.stack(squares),
        torch.stack(fourths),
        torch.maximum(high.abs(), low.abs()),
        high,
        -low,
    ]
    return torch.stack(columns, dim=1)


def empty_rows(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``n`` rows of slots of no values (sums 0, maxima -inf): what merging starts from."""
    rows = torch.zeros((n, len(SLOTS)), dtype=dtype, device=device)
    rows[:, SUMMED:] = -_INF
    return rows


def counted_here(t: torch.Tensor, replicated: bool) -> bool:
    """Whether this rank's values of ``t`` add to the merged sums: a shard or per-rank data
    always; a replica (``replicated``: a plain parameter under DDP; a DTensor along its
    replicated mesh dimensions) only on the first rank holding it."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return True
    if dtensor_kind(t):
        coordinate = t.device_mesh.get_coordinate()  # type: ignore[attr-defined]
        if coordinate is None:
            return False
        placements = t.placements  # type: ignore[attr-defined]
        return all(p.is_shard() or c == 0 for p, c in zip(placements, coordinate, strict=True))
    return not replicated or dist.get_rank() == 0


class _SlotArrival:
    """A step's merged rows arriving on the host (a Deferred): the writer thread waits for the
    copy, then derives each record's value from its tensor's row."""

    def __init__(
        self,
        host: torch.Tensor,
        fence: Any,
        entries: list[tuple[int, list[Record]]],
        sized: set[int],
    ) -> None:
        self.host = host
        self.fence = fence
        self.entries = entries
        self.sized = sized
        self.nbytes = host.numel() * host.element_size()

    def resolve(self) -> None:
        if self.fence is not None:
            self.fence.resolve()
        table = self.host.numpy()
        for row, records in self.entries:
            for rec in records:
                rec.value = derive(table[row], rec.reduction, rec.on_abs)
                if id(rec) in self.sized:
                    rec.shape = (int(table[row, NUMEL]),)
                rec.deferred = None


@dataclass
class _Pending:
    names: list[str] = field(default_factory=list)
    tensors: list[torch.Tensor] = field(default_factory=list)
    records: list[list[Record]] = field(default_factory=list)
    counted: list[bool] = field(default_factory=list)
    accumulate: list[bool] = field(default_factory=list)


@dataclass
class SlotStatistics:
    """The hook's slot buffer: rows written as tensors are saved, merged and sent at step end.

    Rows are given to names in the order they are first saved and kept (so a step saving the
    same tensors as the last writes the same rows, and every rank the same layout).
    """

    _rows: dict[str, int] = field(default_factory=dict)
    _buffer: torch.Tensor | None = None
    _entries: dict[int, list[Record]] = field(default_factory=dict)
    _group: _Pending | None = None
    _numels: dict[Any, torch.Tensor] = field(default_factory=dict)
    _sized: set[int] = field(default_factory=set)  # ids of records to give their size
    kernel: str = "auto"  # how rows are computed (see slot_rows)
    all_reduces: int = 0  # how many all-reduces were issued (tests)

    @staticmethod
    def takes(t: torch.Tensor, specs: tuple[tuple[str, bool], ...]) -> bool:
        """Whether the statistics ``specs`` of ``t`` come from the slots."""
        return t.dtype in _FLOATS and all(s in DERIVABLE for s in specs)

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """Tensors added inside have their rows computed as one group when the block ends."""
        if self._group is not None:
            yield
            return
        self._group = _Pending()
        try:
            yield
        finally:
            group, self._group = self._group, None
            self._write(group)

    def add(
        self,
        name: str,
        t: torch.Tensor,
        records: list[Record],
        counted: bool = True,
        accumulate: bool = False,
    ) -> None:
        """Queue the row of ``t`` (floating) for ``records``. ``counted``: this rank's values
        add to the merged sums (False for a replica another rank counts). ``accumulate``: a
        second save of ``name`` in the step merges into its row (the union of a module's
        calls) instead of replacing it (a parameter's gradient, saved again after another
        backward pass, holds both already)."""
        group = self._group or _Pending()
        group.names.append(name)
        group.tensors.append(t)
        group.records.append(records)
        group.counted.append(counted)
        group.accumulate.append(accumulate)
        if self._group is None:
            self._write(group)

    def add_rows(self, block: torch.Tensor, picks: list[tuple[int, str, list[Record]]]) -> None:
        """Merge rows of slots computed elsewhere (inside a compiled graph) into the step's, as
        per-rank data: ``block[i]`` is the row of the tensor named in ``(i, name, records)``.
        Their records have no shape (a graph's tensors are not seen): they get the size."""
        rows = [self._row(name, block.device) for _, name, _ in picks]
        buffer = self._buffer
        assert buffer is not None
        values = block.to(buffer.device, buffer.dtype)
        taken = [i for i, _, _ in picks]
        if taken == list(range(taken[0], taken[0] + len(taken))):
            self._put(rows, values[taken[0] : taken[0] + len(taken)], True)
        else:
            for i, row in zip(taken, rows, strict=True):
                self._put([row], values[i : i + 1], True)
        for row, (_, _, records) in zip(rows, picks, strict=True):
            self._entries[row] = records
            self._sized.update(id(rec) for rec in records)

    def _row(self, name: str, device: torch.device) -> int:
        row = self._rows.get(name)
        if row is None:
            row = self._rows[name] = len(self._rows)
        buffer = self._buffer
        if buffer is None or row >= buffer.shape[0]:
            capacity = max(64, 2 * (row + 1))
            wide = torch.float32 if device.type == "mps" else torch.float64
            at = buffer.device if buffer is not None else device
            fresh = empty_rows(capacity, wide, at)
            if buffer is not None:
                fresh[: buffer.shape[0]] = buffer
            self._buffer = fresh
        return row

    def _put(self, rows: list[int], values: torch.Tensor, accumulate: bool) -> None:
        """Write (or merge: add the sums, take the larger maxima) ``values`` into ``rows``.
        Rows start each step empty (0 and -inf), so merging into a fresh row writes it."""
        buffer = self._buffer
        assert buffer is not None
        first = rows[0]
        if rows == list(range(first, first + len(rows))):
            targets = [(buffer[first : first + len(rows)], values)]
        else:
            targets = [(buffer[row], values[j]) for j, row in enumerate(rows)]
        for target, value in targets:
            if accumulate:
                target[..., :SUMMED] += value[..., :SUMMED]
                target[..., SUMMED:] = torch.maximum(target[..., SUMMED:], value[..., SUMMED:])
            else:
                target.copy_(value)

    def _write(self, group: _Pending) -> None:
        by_kind: dict[tuple[torch.device, torch.dtype, bool], list[int]] = {}
        for i, t in enumerate(group.tensors):
            if t.numel() == 0:  # an empty shard: its row says so (every rank has the row)
                row = self._row(group.names[i], t.device)
                assert self._buffer is not None
                if not group.accumulate[i]:
                    self._buffer[row] = empty_rows(1, self._buffer.dtype, self._buffer.device)[0]
                self._entries[row] = group.records[i]
                continue
            by_kind.setdefault((t.device, t.dtype, group.accumulate[i]), []).append(i)
        for (_, _, accumulate), indices in by_kind.items():
            tensors = [group.tensors[i] for i in indices]
            rows = [self._row(group.names[i], tensors[0].device) for i in indices]
            assert self._buffer is not None
            values = slot_rows(tensors, self._numels, self.kernel)
            values = values.to(self._buffer.device, self._buffer.dtype)
            for j, i in enumerate(indices):
                if not group.counted[i]:
                    values[j, :SUMMED] = 0.0  # another rank counts this replica
            self._put(rows, values, accumulate)
            for i, row in zip(indices, rows, strict=True):
                self._entries[row] = group.records[i]

    def finish(self) -> None:
        """At step end: merge this step's rows across ranks (one SUM and one MAX all-reduce),
        start their copy to the host, and hand the records a Deferred the writer resolves."""
        if not self._entries or self._buffer is None:
            return
        entries, self._entries = self._entries, {}
        n = len(self._rows)
        buffer = self._buffer
        merged = buffer[:n]
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            merged = self._all_reduce(merged)
        if buffer.device.type == "cuda":
            host = torch.empty(merged.shape, dtype=merged.dtype, pin_memory=True)
            host.copy_(merged, non_blocking=True)
            fence: Any = Fence(buffer.device)
        else:
            host = merged.to("cpu", copy=True)
            fence = None
        sized, self._sized = self._sized, set()
        arrival = _SlotArrival(host, fence, sorted(entries.items()), sized)
        for records in entries.values():
            for rec in records:
                rec.deferred = arrival
        # Ready for the next step (ordered after the copy on the device's stream).
        buffer[:, :SUMMED] = 0.0
        buffer[:, SUMMED:] = -_INF

    def _all_reduce(self, merged: torch.Tensor) -> torch.Tensor:
        device = merged.device
        if dist.get_backend() == "nccl" and device.type != "cuda":
            merged = merged.to(torch.device("cuda", torch.cuda.current_device()))
        sums = merged[:, :SUMMED].contiguous()
        maxima = merged[:, SUMMED:].contiguous()
        dist.all_reduce(sums, op=dist.ReduceOp.SUM)
        dist.all_reduce(maxima, op=dist.ReduceOp.MAX)
        self.all_reduces += 2
        return torch.cat([sums, maxima], dim=1).to(device)

    def discard(self) -> None:
        """A failed step: its rows are dropped (the merge still runs: the other ranks wait)."""
        entries = self._entries
        self.finish()
        for records in entries.values():
            for rec in records:
                rec.deferred = None
