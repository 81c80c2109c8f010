"""Everything saved at one global step, read together.

A rule that judges many tensors per step (every gradient, every weight) asks one
:class:`StepBlock` instead of one :class:`~tensortap.trials._tensor.Tensor` per name: the step's
index rows are looked up once, the raw values it needs are read with one request per run of
nearby bytes, and reductions of all of them are computed in a few vectorised NumPy calls.
Where several workers saved a name, the block answers with the first worker's value, as
``Tensor.value`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from tensortap.core._dtypes import decode_array, storage_dtype
from tensortap.core._records import RecordKind
from tensortap.core._reductions import REDUCTION_NAMES, compute_reduction
from tensortap.exceptions import InvalidConfigError, TensorUnavailableForStep
from tensortap.format._checksum import crc32
from tensortap.format._index import REDUCTION_BY_CODE
from tensortap.trials._index import natural_key
from tensortap.trials._parts import TrialParts
from tensortap.trials._reader import MAX_GAP

if TYPE_CHECKING:
    from tensortap.core._collections import Collection
    from tensortap.trials._index import TrialIndex

# Reductions computed for many tensors at once with ufunc.reduceat; the rest one at a time.
_VECTORISED = frozenset({"min", "max", "mean", "sum", "l1", "l2"})


class StepBlock:
    """The tensors saved at global step ``step`` of a trial (see the module docstring)."""

    def __init__(self, trial: TrialParts, step: int) -> None:
        self._trial, self.step = trial, step
        index = trial.saved_index
        parts = sorted(
            index.step_rows.get(step, []),
            key=lambda part: natural_key(index.segments[part[0]].worker),
        )
        one_worker = len({index.segments[part[0]].worker for part in parts}) <= 1
        self._order: dict[str, str] = {}  # name -> worker that answers for it, in saved order
        self._raw_pos: dict[str, int] = {}
        self._reductions: dict[str, dict[tuple[str, bool], float]] = {}
        raw_parts: list[tuple[int, np.ndarray]] = []  # (segment, its raw rows at the step)
        for seg_id, lo, hi in parts:
            worker = index.segments[seg_id].worker
            cols = index.columns(seg_id)
            names = cols.names[lo:hi].tolist()
            if one_worker:
                self._order.update(dict.fromkeys(names, worker))
                mine = None
            else:
                for name in names:
                    self._order.setdefault(name, worker)
                mine = np.asarray([self._order[n] == worker for n in names], dtype=bool)
            kinds = cols.kind[lo:hi]
            is_raw = kinds == RecordKind.TENSOR
            if mine is not None:
                is_raw &= mine
            raw_rows = np.flatnonzero(is_raw)
            if len(raw_rows):
                base = sum(len(rows) for _, rows in raw_parts)
                raw_names = [names[i] for i in raw_rows.tolist()]
                self._raw_pos.update(zip(raw_names, range(base, base + len(raw_rows)), strict=True))
                raw_parts.append((seg_id, raw_rows + lo))
            if len(raw_rows) < len(names):
                is_reduced = kinds == RecordKind.REDUCTION
                if mine is not None:
                    is_reduced &= mine
                for i in (np.flatnonzero(is_reduced) + lo).tolist():
                    key = (REDUCTION_BY_CODE[int(cols.reduction[i])], bool(cols.abs[i]))
                    self._reductions.setdefault(names[i - lo], {})[key] = float(cols.value[i])
        # the raw values, as columns: position i is the i-th raw value of the step
        self._seg = np.concatenate(
            [np.full(len(rows), seg_id) for seg_id, rows in raw_parts] or [np.zeros(0, np.intp)]
        )
        self._row = np.concatenate([rows for _, rows in raw_parts] or [np.zeros(0, np.intp)])
        self._off, self._len, self._crc, self._dtype = (
            _gather(index, raw_parts, column) for column in ("offset", "length", "crc", "dtype")
        )
        self._segments = len(raw_parts)
        self._run_of = np.full(len(self._off), -1, dtype=np.intp)  # loaded run of each value
        self._run_start = np.zeros(len(self._off), dtype=np.int64)  # and where that run starts
        self._plain = np.asarray([_plain(d) for d in index.dtype_names], dtype=np.int64)
        self._runs: list[tuple[int, memoryview]] = []  # (start offset, bytes)
        self._nonfinite: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {}

    def __repr__(self) -> str:
        return f"StepBlock(step={self.step}, {len(self._order)} tensors)"

    # -- what was saved --
    def names(
        self, collection: str | Collection | None = None, regex: str | None = None
    ) -> list[str]:
        """Sorted names saved at this step, optionally only a collection's or a regex's."""
        if collection is None and regex is None:
            return sorted(self._order)
        wanted = self._trial.tensor_names(collection=collection, regex=regex)
        return [n for n in wanted if n in self._order]

    def saved_order(self) -> list[str]:
        """Names in the order the hook saved them (forward order for activations), the first
        worker's first."""
        return list(self._order)

    def __contains__(self, name: object) -> bool:
        return name in self._order

    def has_raw(self, name: str) -> bool:
        """True if the raw value (not only reductions or the shape) was saved."""
        return name in self._raw_pos

    def saved_reductions(self, name: str) -> dict[tuple[str, bool], float]:
        """Reductions the hook saved of ``name``, keyed by (name, abs)."""
        self._require(name)
        self._trial.values_read += 1
        return dict(self._reductions.get(name, {}))

    def value(self, name: str) -> np.ndarray:
        """The raw value of ``name`` (a new array)."""
        pos = self._raw_pos.get(name)
        if pos is None:
            self._require(name)
            raise TensorUnavailableForStep(
                name, self.step, note="only reductions or the shape were saved at this step"
            )
        self._load(np.asarray([pos]))
        self._trial.values_read += 1
        return np.array(self._decoded(pos, flat=False), copy=True)

    # -- many tensors at once --
    def reduce(self, names: Sequence[str], reduction: str, abs: bool = False) -> np.ndarray:
        """One reduction of each of ``names`` (float64, in their order): the saved reduction
        where the hook saved it, else computed from the raw value."""
        name = reduction.lower()
        if name not in REDUCTION_NAMES:
            raise InvalidConfigError(
                f"unknown reduction {reduction!r}; accepted: {', '.join(REDUCTION_NAMES)}"
            )
        out = np.empty(len(names))
        self._trial.values_read += len(names)
        if not self._reductions:  # the usual case: raw values only
            raw = self._raw_positions(names)
            return self._reduce_raw(out, np.arange(len(names)), raw, name, bool(abs))
        slots: list[int] = []
        positions: list[int] = []
        key = (name, bool(abs))
        for i, tname in enumerate(names):
            saved = self._reductions.get(tname)
            if saved is not None and key in saved:
                out[i] = saved[key]
                continue
            pos = self._raw_pos.get(tname)
            if pos is None:
                self._require(tname)
                have = ", ".join(f"{'abs_' if a else ''}{r}" for r, a in saved or {}) or "none"
                raise TensorUnavailableForStep(
                    tname,
                    self.step,
                    note=f"neither the reduction {'abs_' if abs else ''}{name} nor the raw "
                    f"tensor was saved at this step (saved reductions: {have})",
                )
            slots.append(i)
            positions.append(pos)
        where, raw = np.asarray(slots, dtype=np.intp), np.asarray(positions, dtype=np.intp)
        return self._reduce_raw(out, where, raw, name, bool(abs))

    def _reduce_raw(
        self, out: np.ndarray, where: np.ndarray, raw: np.ndarray, name: str, on_abs: bool
    ) -> np.ndarray:
        """Fill ``out[where]`` with the reduction of the raw values at positions ``raw``."""
        for members, group in self._parts(raw):
            if group is not None and name in _VECTORISED:
                out[where[members]] = _reduceat(group, name, on_abs)
            else:
                for m in members.tolist():
                    out[where[m]] = compute_reduction(self._decoded(raw[m]), name, on_abs)
        return out

    def count_where(
        self, names: Sequence[str], test: Callable[[np.ndarray], np.ndarray]
    ) -> np.ndarray:
        """How many elements of each of ``names`` (raw values, in their order) pass ``test``,
        an elementwise NumPy function returning booleans (``np.isnan``, ``lambda x: x == 0``).
        """
        positions = self._raw_positions(names)
        self._trial.values_read += len(names)
        counts = np.zeros(len(names), dtype=np.int64)
        for members, group in self._parts(positions):
            with np.errstate(all="ignore"):
                if group is not None:
                    hits = np.add.reduceat(test(group.view), group.bounds, dtype=np.int64)
                    counts[members] = hits[0::2]
                    continue
                for m in members.tolist():
                    counts[m] = int(np.count_nonzero(test(self._decoded(positions[m]))))
        return counts

    def nonfinite(self, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(NaN count, infinite count) of each of ``names`` with a raw value (in their order);
        kept for the block's life (several rules of a walk ask the same at one step)."""
        key = tuple(names)
        found = self._nonfinite.get(key)
        if found is not None:
            self._trial.values_read += len(names)  # read again, as far as a rule can tell
            return found[0].copy(), found[1].copy()
        bad = self.count_where(names, _not_finite)
        if not bad.any():
            found = (bad, np.zeros_like(bad))
        else:
            found = (self.count_where(names, np.isnan), self.count_where(names, np.isinf))
        self._nonfinite[key] = found
        return found[0].copy(), found[1].copy()

    def dtypes(self, names: Sequence[str]) -> list[np.dtype[Any]]:
        """The stored dtype of each of ``names`` (raw values, in their order)."""
        positions = self._raw_positions(names)
        dtype_names = self._trial.saved_index.dtype_names
        return [storage_dtype(dtype_names[d]) for d in self._dtype[positions].tolist()]

    def sizes(self, names: Sequence[str]) -> np.ndarray:
        """The element count of each of ``names`` (raw values, in their order)."""
        positions = self._raw_positions(names)
        dtype_names = self._trial.saved_index.dtype_names
        itemsize = np.asarray([storage_dtype(d).itemsize for d in dtype_names], dtype=np.int64)
        return self._len[positions] // itemsize[self._dtype[positions]]  # type: ignore[no-any-return]

    # -- reading --
    def _require(self, name: str) -> None:
        if name not in self._order:
            raise TensorUnavailableForStep(name, self.step)

    def _raw_positions(self, names: Sequence[str]) -> np.ndarray:
        try:
            return np.fromiter(map(self._raw_pos.__getitem__, names), np.intp, len(names))
        except KeyError:
            return np.asarray([self._raw_position(n) for n in names], dtype=np.intp)

    def split_raw(self, names: Sequence[str]) -> tuple[list[str], list[str]]:
        """``names`` split into (those with a raw value, those with only reductions/shape)."""
        raw_pos = self._raw_pos
        if len(raw_pos) == len(self._order):  # only raw values at this step
            return list(names), []
        raw = [n for n in names if n in raw_pos]
        return raw, [n for n in names if n not in raw_pos]

    def _raw_position(self, name: str) -> int:
        pos = self._raw_pos.get(name)
        if pos is None:
            self._require(name)
            raise TensorUnavailableForStep(
                name, self.step, note="only reductions or the shape were saved at this step"
            )
        return pos

    def raw_ranges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(segment, offset, end) of every raw value of the step (for reading ahead)."""
        return self._seg, self._off, self._off + self._len

    def load(self, windows: Sequence[tuple[int, int, memoryview]]) -> None:
        """Take (and verify) every raw value from ``windows``, already fetched bytes as
        (segment, start, bytes) that together cover :meth:`raw_ranges` runs."""
        self._load(np.arange(len(self._off)), windows)

    def _load(
        self,
        positions: np.ndarray,
        windows: Sequence[tuple[int, int, memoryview]] | None = None,
    ) -> None:
        """Read (and verify) the raw bytes of ``positions`` not read yet: one request per run
        of values less than MAX_GAP bytes apart (or slices of ``windows``)."""
        todo = positions[self._run_of[positions] < 0]
        if not len(todo):
            return
        segs, offs, lens = self._seg[todo], self._off[todo], self._len[todo]
        order = np.lexsort((offs, segs)) if self._segments > 1 else np.argsort(offs)
        todo, segs, offs, lens = todo[order], segs[order], offs[order], lens[order]
        ends = offs + lens
        cuts = np.flatnonzero((segs[1:] != segs[:-1]) | (offs[1:] - ends[:-1] > MAX_GAP)) + 1
        reader = self._trial.value_reader
        crcs = self._crc[todo].tolist()
        bounds = list(zip([0, *cuts.tolist()], [*cuts.tolist(), len(todo)], strict=True))
        runs = [(int(segs[lo]), int(offs[lo]), int(ends[lo:hi].max())) for lo, hi in bounds]
        bufs = reader.read_runs(runs) if windows is None else _slices(windows, runs)
        for (lo, hi), buf in zip(bounds, bufs, strict=True):
            segment, start = int(segs[lo]), int(offs[lo])
            rel = zip((offs[lo:hi] - start).tolist(), (ends[lo:hi] - start).tolist(), strict=True)
            bad = [
                i
                for i, ((a, b), crc) in enumerate(zip(rel, crcs[lo:hi], strict=True))
                if crc32(buf[a:b]) != crc
            ]
            for i in bad[:1]:  # raises, naming the value
                a, b = int(offs[lo + i]) - start, int(ends[lo + i]) - start
                reader.check(segment, start + a, crcs[lo + i], buf[a:b])
            self._run_of[todo[lo:hi]] = len(self._runs)
            self._run_start[todo[lo:hi]] = start
            self._runs.append((start, buf))

    def _decoded(self, pos: int, flat: bool = True) -> np.ndarray:
        start, buf = self._runs[self._run_of[pos]]
        at = int(self._off[pos]) - start
        piece = buf[at : at + int(self._len[pos])]
        stored = self._trial.saved_index.dtype_names[self._dtype[pos]]
        if flat:
            return decode_array(piece, stored, (-1,))
        index = self._trial.saved_index
        seg_id, row = int(self._seg[pos]), int(self._row[pos])
        columns = index.columns(seg_id)
        dims_at, ndim = int(columns.dims_offset[row]), int(columns.ndim[row])
        dims = index.segments[seg_id].index.dims[dims_at : dims_at + ndim]
        return decode_array(piece, stored, tuple(dims.tolist()))

    def _parts(self, positions: np.ndarray) -> Iterator[tuple[np.ndarray, _Group | None]]:
        """Load ``positions`` and split them into groups reduced together: yields (indices
        into ``positions``, their group). A group holds values of one run and one plain float
        dtype, reduced with ``reduceat`` on a flat view of the run; the rest (bfloat16,
        integers, complex, empty tensors) come with no group, to be decoded one by one."""
        if not len(positions):
            return
        self._load(positions)
        codes = self._dtype[positions]
        lengths = self._len[positions]
        rel = self._off[positions] - self._run_start[positions]
        vector = (self._plain[codes] > 0) & (lengths > 0) & (rel % 8 == 0)
        keys = np.where(vector, self._run_of[positions] * len(self._plain) + codes, -1)
        low, high = int(keys.min()), int(keys.max())
        for key in [low] if low == high else np.unique(keys).tolist():
            members = np.arange(len(keys)) if low == high else np.flatnonzero(keys == key)
            if key < 0:
                yield members, None
                continue
            run, code = divmod(key, len(self._plain))
            size = int(self._plain[code])
            buf = self._runs[run][1]
            view = np.frombuffer(
                buf, dtype=self._trial.saved_index.dtype_names[code], count=len(buf) // size
            )
            first = rel[members] // size
            order = np.argsort(first)
            members, first = members[order], first[order]
            counts = lengths[members] // size
            bounds = np.empty(2 * len(members), dtype=np.intp)
            bounds[0::2] = first
            bounds[1::2] = first + counts
            if bounds[-1] == len(view):
                bounds = bounds[:-1]  # reduceat runs the last slice to the end by itself
            yield members, _Group(view, bounds, counts)


class _Group(NamedTuple):
    """Values of one run and dtype, by offset, reduced together."""

    view: np.ndarray  # the run's bytes as the group's dtype
    bounds: np.ndarray  # reduceat indices: start0, end0, start1, end1, ...
    counts: np.ndarray  # element count of each member


def _gather(index: TrialIndex, parts: list[tuple[int, np.ndarray]], column: str) -> np.ndarray:
    """One StepColumns column at the rows of ``parts``, concatenated."""
    if len(parts) == 1:
        seg_id, rows = parts[0]
        return getattr(index.columns(seg_id), column)[rows]  # type: ignore[no-any-return]
    return np.concatenate(
        [getattr(index.columns(seg_id), column)[rows] for seg_id, rows in parts]
        or [np.zeros(0, dtype=np.int64)]
    )


def _not_finite(x: np.ndarray) -> np.ndarray:
    found: np.ndarray = ~np.isfinite(x)
    return found


def _plain(stored: str) -> int:
    """The item size of a little-endian float dtype reduced in bulk; 0 for the others."""
    return int(stored[2]) if stored in ("<f2", "<f4", "<f8") else 0


def _reduceat(group: _Group, name: str, on_abs: bool) -> Any:
    """``name`` of each member of a group (see StepBlock._parts), as float64."""
    view, bounds = group.view, group.bounds
    with np.errstate(all="ignore"):
        x = np.abs(view) if on_abs or name == "l1" else view
        if name == "min":
            return np.minimum.reduceat(x, bounds)[0::2]
        if name == "max":
            return np.maximum.reduceat(x, bounds)[0::2]
        if name == "l2":
            return np.sqrt(np.add.reduceat(np.square(x, dtype=np.float64), bounds)[0::2])
        sums = np.add.reduceat(x, bounds, dtype=np.float64)[0::2]
        return sums / group.counts if name == "mean" else sums  # mean; sum, l1


def _slices(
    windows: Sequence[tuple[int, int, memoryview]], runs: Sequence[tuple[int, int, int]]
) -> list[memoryview]:
    """Each run's bytes, cut from the window holding it."""
    out = []
    for segment, start, end in runs:
        for seg, at, buf in windows:
            if seg == segment and at <= start and end <= at + len(buf):
                out.append(buf[start - at : end - at])
                break
        else:
            raise AssertionError(f"no window holds bytes {start}:{end} of segment {segment}")
    return out
