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
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from tensortap.core._records import Record
from tensortap.pytorch._device_stats import Fence
from tensortap.pytorch._sharded import dtensor_kind
from tensortap.pytorch._slot_kernels import KERNELS, empty_rows, row_of, slot_rows
from tensortap.pytorch._slot_layout import (
    ACTIVATION_GRADIENTS,
    DERIVABLE,
    NUMEL,
    SLOTS,
    STATISTICS_CHOICES,
    SUMMED,
    check_statistics,
    derive,
    not_derivable,
    refuse_collections,
    refuse_not_derivable,
)

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_INF = float("inf")


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


__all__ = [  # and, for code that imported them here, the layout's and the kernels' names
    "ACTIVATION_GRADIENTS",
    "DERIVABLE",
    "KERNELS",
    "SLOTS",
    "STATISTICS_CHOICES",
    "SUMMED",
    "SlotStatistics",
    "check_statistics",
    "counted_here",
    "derive",
    "empty_rows",
    "not_derivable",
    "refuse_collections",
    "refuse_not_derivable",
    "row_of",
    "slot_rows",
]
