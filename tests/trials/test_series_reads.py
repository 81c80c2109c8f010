"""Reading series costs what is read (issue 48): ``trial.series()`` reads the series objects and
rollups, never the index (64 bytes a value) nor the data; the bytes it fetches and the memory it
holds grow as the values it returns; and the values are those saved, whatever the steps, modes,
bounds and segments (a fuzz over random runs written through the public hook)."""

from __future__ import annotations

import math
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tensortap as tt
from tensortap.format import _layout as layout
from tensortap.storage import Store, open_store
from tensortap.trials import _series
from tensortap.trials._series import SeriesReader
from tensortap.writer import WriterOptions

MODES = (tt.modes.TRAIN, tt.modes.EVAL, tt.modes.PREDICT)


def _write_grid(out: Path, steps: int, series: int, flush_every: int, compact: bool = True) -> None:
    """``series`` scalars at every step through ``Hook.save_scalar``, a segment every
    ``flush_every`` steps (what ``flush_secs`` does to a paced run)."""
    hook = tt.Hook(
        out,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["scalars"],
        writer_options=WriterOptions(compact=compact),
    )
    names = [f"series/{i:03d}" for i in range(series)]
    for step in range(steps):
        for i, name in enumerate(names):
            hook.save_scalar(name, float(step * 1000 + i))
        hook.next_step()
        if step % flush_every == flush_every - 1:
            hook.flush()
    assert hook.close().healthy


class _Reads:
    """The objects a reader fetched (whole or in part) and the bytes it got, by folder."""

    def __init__(self) -> None:
        self.objects: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()
        self.batch = 0  # inside get_many/get_ranges: their own reads are counted there

    def note(self, key: str, size: int) -> None:
        if self.batch:
            return
        folder = key.split("/")[2] if key.startswith(layout.WORKERS_PREFIX) else key
        self.objects[folder] += 1
        self.bytes[folder] += size


def _counting(location: Path) -> tuple[Store, _Reads]:
    """The store at ``location``, noting every read (listing is not a read)."""
    store = open_store(str(location))
    reads = _Reads()
    get, get_range, get_many, get_ranges = (
        store.get,
        store.get_range,
        store.get_many,
        store.get_ranges,
    )

    def counted_get(key: str) -> bytes:
        raw = get(key)
        reads.note(key, len(raw))
        return raw

    def counted_range(key: str, start: int, length: int) -> bytearray:
        raw = get_range(key, start, length)
        reads.note(key, len(raw))
        return raw

    def counted_many(keys: Any) -> list[bytes]:
        reads.batch += 1
        try:
            raws = get_many(keys)
        finally:
            reads.batch -= 1
        for key, raw in zip(keys, raws, strict=True):
            reads.note(key, len(raw))
        return raws

    def counted_ranges(ranges: Any) -> list[bytearray]:
        reads.batch += 1
        try:
            raws = get_ranges(ranges)
        finally:
            reads.batch -= 1
        for (key, _, _), raw in zip(ranges, raws, strict=True):
            reads.note(key, len(raw))
        return raws

    store.get = counted_get  # type: ignore[method-assign]
    store.get_range = counted_range  # type: ignore[method-assign]
    store.get_many = counted_many  # type: ignore[method-assign]
    store.get_ranges = counted_ranges  # type: ignore[method-assign]
    return store, reads


def test_trial_series_reads_no_index_and_bytes_as_the_values(tmp_path: Path) -> None:
    steps, series = 600, 20
    _write_grid(tmp_path, steps, series, flush_every=10)  # 60 segments, a rollup of 64 not yet
    store, reads = _counting(tmp_path)
    columns = tt.create_trial(store).series()
    assert len(columns["value"]) == steps * series
    assert columns["value"][steps * 3 + 7] == 7 * 1000 + 3  # series/003, step 7
    # no index object and no data object: only the series objects (and the small documents)
    assert reads.objects["index"] == 0, reads.objects
    assert reads.objects["data"] == 0, reads.objects
    # 16 bytes a value (its step and number), a 32-byte row per step and object, the heads
    segments = steps // 10
    heads = segments * (1024 + 24 * series)
    assert (
        reads.bytes["series"] + reads.bytes["rollups"] <= 16 * steps * series + 32 * steps + heads
    )
    # names, mode steps and wall times are made from what was read, when asked for
    assert columns["step"][steps * 3 + 7] == 7
    assert set(columns["tensor"][:steps]) == {"series/000"}
    assert reads.objects["index"] == 0


def test_a_series_asked_by_name_reads_no_index(tmp_path: Path) -> None:
    _write_grid(tmp_path, 50, 4, flush_every=10)
    store, reads = _counting(tmp_path)
    trial = tt.create_trial(store)
    got = trial.series("series/002")
    assert got["value"].tolist() == [float(s * 1000 + 2) for s in range(50)]
    assert reads.objects["index"] == 0
    trial.steps()  # the index is read when something needs it
    assert reads.objects["index"] == 1  # the 5 segments merged into one at close
    assert trial.series("series/002")["value"].tolist() == got["value"].tolist()


def test_reading_holds_the_result_and_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Peak memory of reading every series is about its result (16 bytes a value: global
    step and number), not copies of it: the values are read a batch at a time into place."""
    steps, series = 4000, 50
    # segments kept: an object is read whole, and a merged one holds up to 2^20 values
    _write_grid(tmp_path, steps, series, flush_every=100, compact=False)
    monkeypatch.setattr(_series, "BATCH_BYTES", 256 << 10)
    reader = SeriesReader(tmp_path)
    reader.keys()  # the heads, read once, are not what is measured
    tracemalloc.start()
    try:
        columns = reader.series()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    values = steps * series
    assert len(columns["global_step"]) == len(columns["value"]) == values
    assert peak <= 16 * values + (2 << 20), peak / values


def _fuzz_run(
    out: Path, seed: int, compact: bool = True
) -> dict[tuple[str, str, int], list[tuple[int, int, float]]]:
    """A random run through the public hook: steps skipped, modes switched, a random subset
    of series saved per step (non-finite numbers too), segments cut at random (merged at close,
    as by default, unless not ``compact``); what was saved, per (tensor, mode name,
    worker-free) series: (global step, mode step, value)."""
    rng = np.random.default_rng(seed)
    hook = tt.Hook(
        out,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["scalars"],
        writer_options=WriterOptions(compact=compact),
    )
    names = [f"s{i}" for i in range(int(rng.integers(1, 12)))]
    saved: dict[tuple[str, str, int], list[tuple[int, int, float]]] = {}
    for _ in range(int(rng.integers(50, 400))):
        if rng.random() < 0.05:
            hook.set_mode(MODES[int(rng.integers(0, 3))])
        if rng.random() < 0.1:  # a step that saves nothing
            hook.next_step()
            continue
        for name in names:
            if rng.random() < 0.7:
                value = float(
                    rng.choice([rng.normal(), np.nan, np.inf, -np.inf], p=[0.94, 0.02, 0.02, 0.02])
                )
                hook.save_scalar(name, value)
                key = (name, hook.mode.name, 0)
                saved.setdefault(key, []).append((hook.step, hook.mode_step, value))
        hook.next_step()
        if rng.random() < 0.08:
            hook.flush()
    assert hook.close().healthy
    return saved


@pytest.mark.parametrize("seed", range(6))
def test_series_equal_what_was_saved_over_random_runs(tmp_path: Path, seed: int) -> None:
    saved = _fuzz_run(tmp_path, seed)
    rng = np.random.default_rng(1000 + seed)
    store, reads = _counting(tmp_path)
    trial = tt.create_trial(store)
    last = max(g for rows in saved.values() for g, _, _ in rows)
    bounds = [(None, None)] + [
        tuple(sorted(int(b) for b in rng.integers(-5, last + 5, 2))) for _ in range(4)
    ]
    for start, end in bounds:
        columns = trial.series(start=start, end=end)
        got: dict[tuple[str, str, int], list[tuple[int, int, float]]] = {}
        for key, part in columns.groups():
            assert key.statistic == "value" and key.worker == "worker_0"
            rows = zip(part["global_step"].tolist(), part["step"].tolist(), part["value"].tolist())
            got[(key.tensor, key.mode.name, 0)] = list(rows)
        lo = -(2**62) if start is None else start
        hi = 2**62 if end is None else end
        want = {key: [row for row in rows if lo <= row[0] < hi] for key, rows in saved.items()}
        want = {key: rows for key, rows in want.items() if rows}
        assert _nan_safe(got) == _nan_safe(want), (seed, start, end)
        names = sorted({key[0] for key in want})
        if names:  # one series by name, within the bounds, equals its rows
            name = names[int(rng.integers(0, len(names)))]
            one = trial.series(name, start=start, end=end)
            assert sorted(_nan_safe_rows(one)) == sorted(_nan_safe_rows_of(want, name)), (
                seed,
                name,
            )
    assert reads.objects["index"] == 0


def _nan_safe(found: dict[Any, list[tuple[int, int, float]]]) -> dict[Any, list[tuple[Any, ...]]]:
    return {
        key: [(g, s, "nan" if math.isnan(v) else v) for g, s, v in rows]
        for key, rows in found.items()
    }


def _nan_safe_rows(columns: Any) -> list[tuple[Any, ...]]:
    return [
        (t, m, g, "nan" if math.isnan(v) else v)
        for t, m, g, v in zip(
            columns["tensor"].tolist(),
            columns["mode"].tolist(),
            columns["global_step"].tolist(),
            columns["value"].tolist(),
        )
    ]


def _nan_safe_rows_of(
    want: dict[tuple[str, str, int], list[tuple[int, int, float]]], name: str
) -> list[tuple[Any, ...]]:
    return [
        (tensor, mode, g, "nan" if math.isnan(v) else v)
        for (tensor, mode, _), rows in want.items()
        if tensor == name
        for g, _, v in rows
    ]


def _bucket_rows(columns: Any) -> list[tuple[Any, ...]]:
    """Every bucket as a row (NaN as "nan": comparable), in the order returned."""
    names = ("worker", "mode", "tensor", "statistic", "first_step", "last_step", "count")
    numbers = ("min", "max", "last", "nonfinite")
    rows = []
    for i in range(columns.rows):
        found = [columns[n][i] for n in names]
        for n in numbers:
            value = float(columns[n][i])
            found.append("nan" if math.isnan(value) else value)
        rows.append(tuple(found))
    return rows


def _buckets_of_rows(columns: Any, start: int | None, end: int | None, count: int) -> Any:
    """What :meth:`SeriesReader.buckets` answered before it read in bounded pieces: every
    series read at once (``series()``), each cut by :func:`bucketed` over its extent."""
    from tensortap.trials._series_columns import bucket_columns, bucketed

    pieces, groups, at = [], [], 0
    for key, part in columns.groups():
        steps, values = part["global_step"], part["value"]
        first = start if start is not None else int(steps[0])
        stop = end if end is not None else int(steps[-1]) + 1
        found = bucketed(steps, values, first, stop, count)
        pieces.append((key, found))
        groups.append((key, at, at + len(found[0])))
        at += len(found[0])
    return bucket_columns(pieces, groups)


@pytest.mark.parametrize("seed", range(4))
def test_buckets_read_in_bounded_pieces_equal_one_read_of_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Whatever the bound on values held (a series alone longer than it, read object by
    object, or many series in one group), the buckets are those of every value read at once."""
    saved = _fuzz_run(tmp_path, seed)
    rng = np.random.default_rng(2000 + seed)
    last = max(g for rows in saved.values() for g, _, _ in rows)
    bounds = [(None, None), (None, last // 2), (last // 3, None)] + [
        tuple(sorted(int(b) for b in rng.integers(-5, last + 5, 2))) for _ in range(2)
    ]
    reader = SeriesReader(tmp_path)
    for start, end in bounds:
        for count in (1, 7, 600):
            want = _bucket_rows(
                _buckets_of_rows(reader.series(start=start, end=end), start, end, count)
            )
            for most in (1, 5, 40, 1 << 20):
                monkeypatch.setattr(_series, "BUCKET_READ_VALUES", most)
                got = _bucket_rows(reader.buckets(start=start, end=end, count=count))
                assert got == want, (seed, start, end, count, most)


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_series_walked_in_windows_are_the_series_read_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, compact: bool
) -> None:
    """``series_windows`` answers every row ``series`` does, in step order, window by
    window, with their mode steps and wall times, whatever the bound (windows of a few values
    over random runs, or one window when everything fits); kept segment by segment, a run is
    walked in several windows (compacted, it is one object: one window)."""
    _fuzz_run(tmp_path, seed, compact)
    reader = SeriesReader(tmp_path)
    names = ("global_step", "step", "wall_time", "value")

    def rows(columns: Any) -> dict[Any, list[tuple[Any, ...]]]:
        found: dict[Any, list[tuple[Any, ...]]] = {}
        for key, part in columns.groups():
            cols = [part[n].tolist() for n in names]
            found.setdefault(key, []).extend(
                tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in row)
                for row in zip(*cols, strict=True)
            )
        return found

    for mode in (None, "TRAIN"):
        want = rows(reader.series(mode=mode))
        for most in (4, 60, 1 << 20):
            monkeypatch.setattr(_series, "BUCKET_READ_VALUES", most)
            windows = list(reader.series_windows(mode=mode))
            got: dict[Any, list[tuple[Any, ...]]] = {}
            for window in windows:
                for key, found in rows(window).items():
                    got.setdefault(key, []).extend(found)
            assert got == want, (seed, mode, most)
            if most == 1 << 20:
                assert len(windows) == 1
            elif most == 4 and not compact:
                assert len(windows) > 1


def test_a_long_series_read_in_pieces_holds_about_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Peak memory of bucketing every series is about the bound on values held (16 bytes a
    value, and the bytes of a batch), not the 200,000 values asked for (3.2 MB)."""
    steps, series, most = 4000, 50, 20_000
    _write_grid(tmp_path, steps, series, flush_every=100, compact=False)
    reader = SeriesReader(tmp_path)
    reader.keys()  # the heads, read once, are not what is measured
    want = _bucket_rows(reader.buckets(count=100))
    monkeypatch.setattr(_series, "BUCKET_READ_VALUES", most, raising=False)
    tracemalloc.start()
    try:
        got = reader.buckets(count=100)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert _bucket_rows(got) == want
    answer = 7 * 8 * 100 * series  # the buckets returned
    assert peak <= 2 * 16 * most + 2 * answer + (256 << 10), peak


def test_a_long_series_with_a_damaged_first_step_is_bucketed_as_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A series read in pieces takes its extent from the first and last step of its blocks,
    unchecked: where damage changed one, the blocks' checks send the object to its indexes,
    and the buckets are made again over the steps read: the same as undamaged."""
    _write_grid(tmp_path, 300, 3, flush_every=50, compact=False)
    want = _bucket_rows(SeriesReader(tmp_path).buckets(count=7))
    reader = SeriesReader(tmp_path)
    state = reader.objects.workers["worker_0"]
    source, head = next(iter(reader.objects.heads_of(state.plan, state)))
    offset, _ = head.block_range([k[0] for k in head.keys].index("series/001"))
    path = tmp_path / source.key
    raw = bytearray(path.read_bytes())
    raw[offset : offset + 8] = (-(10**6)).to_bytes(8, "little", signed=True)  # its first step
    path.write_bytes(bytes(raw))
    monkeypatch.setattr(_series, "BUCKET_READ_VALUES", 10)  # every series read in pieces
    reader = SeriesReader(tmp_path)
    assert _bucket_rows(reader.buckets(count=7)) == want
    assert any("checksum" in problem for problem in reader.problems)
