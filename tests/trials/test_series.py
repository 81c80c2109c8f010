"""The series path: every saved number as columns, read from the series objects and rollups the
writer publishes (or from the indexes of a trial written without them)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensortap as tt
from tensortap.exceptions import InvalidConfigError
from tensortap.format import _layout as layout
from tensortap.trials._columns import published_segments, scalar_columns
from tensortap.trials._series import SeriesReader, bucketed
from tensortap.trials._series_columns import merge_buckets
from tensortap.writer import WriterOptions
from tensortap.writer import _series as writer_series


def write_run(out: Path | str, steps: int = 40, flush_every: int = 0, worker: int = 0) -> None:
    """Losses (raw one-element values), gradient reductions (l2, abs max), a bfloat-free
    int metric, a non-finite value, TRAIN then EVAL steps; each segment kept as published
    (no compaction: these tests read segments' own series objects)."""
    hook = tt.Hook(
        out,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["losses", "metrics", "gradients"],
        worker=worker,
        writer_options=WriterOptions(compact=False),
    )
    hook.get_collection("gradients").reduction_config = tt.ReductionConfig(
        norms=["l2"], abs_reductions=["max"]
    )
    rng = np.random.default_rng(worker)
    for step in range(steps):
        hook.set_mode(tt.modes.EVAL if step >= steps * 3 // 4 else tt.modes.TRAIN)
        loss = np.float32(np.inf) if step == 5 else np.float32(1 / (1 + step))
        hook.save_tensor("loss", loss, collections="losses")
        hook.save_tensor("correct", np.array([step % 3], dtype=np.int64), collections="metrics")
        hook.save_tensor("fc.weight_grad", rng.normal(size=(3, 2)), collections="gradients")
        hook.save_tensor("big", rng.normal(size=4), collections="metrics")  # not one number
        hook.next_step()
        if flush_every and step % flush_every == flush_every - 1:
            hook.flush()
    hook.close()


def rows_of(columns: object) -> set[tuple[object, ...]]:
    cols = dict(columns)  # type: ignore[call-overload]
    names = ("worker", "mode", "step", "global_step", "tensor", "statistic")
    out = set()
    for i in range(len(cols["value"])):
        value = float(cols["value"][i])
        out.add((*(cols[n][i] for n in names), "nan" if math.isnan(value) else value))
    return out


def test_series_hold_every_number_the_trial_holds(tmp_path: Path) -> None:
    write_run(tmp_path, steps=40, flush_every=7)
    trial = tt.create_trial(tmp_path)
    got = trial.series()
    # the same rows as the index path (tensortap export), and the same values as the Tensor API
    assert rows_of(got) == rows_of(scalar_columns(trial.parts, published_segments(trial.parts)))
    assert got.rows == 40 * 4
    loss = trial.series("loss")
    assert list(loss["global_step"]) == list(range(40))
    assert loss["value"][5] == np.inf
    assert loss["value"][7] == pytest.approx(float(trial.tensor("loss").value(7)))
    l2 = trial.series("fc.weight_grad", statistic="l2", mode="EVAL")
    assert list(l2["global_step"]) == list(range(30, 40))
    assert list(l2["step"]) == list(range(10))
    expected = [trial.tensor("fc.weight_grad").reduction_value(g, "l2") for g in range(30, 40)]
    assert np.allclose(l2["value"], expected)
    assert set(got["statistic"]) == {"value", "l2", "abs_max"}
    assert "big" not in set(got["tensor"])  # four numbers are not one series
    assert np.isfinite(got["wall_time"]).all()
    keys = trial.series_keys()
    assert [k.tensor for k in keys].count("loss") == 2  # TRAIN and EVAL
    # each group is one series, sorted by step
    for key, part in got.groups():
        assert set(part["tensor"]) == {key.tensor} and set(part["mode"]) == {key.mode.name}
        assert (np.diff(part["global_step"]) > 0).all()


def test_filters_and_bad_arguments(tmp_path: Path) -> None:
    write_run(tmp_path, steps=20)
    reader = SeriesReader(tmp_path)
    assert set(reader.series(regex=r"_grad$")["tensor"]) == {"fc.weight_grad"}
    assert set(reader.series(statistic=["abs_max"])["statistic"]) == {"abs_max"}
    part = reader.series("loss", start=4, end=9)
    assert list(part["global_step"]) == [4, 5, 6, 7, 8]
    assert reader.series("loss", worker="worker_9").rows == 0
    assert reader.series("nothing").rows == 0 and set(reader.series("nothing")) >= {"value"}
    with pytest.raises(InvalidConfigError, match="mode"):
        reader.series(mode="TRAINING")
    with pytest.raises(InvalidConfigError, match="count"):
        reader.buckets(count=0)
    with pytest.raises(InvalidConfigError, match="start"):
        reader.series(start="3")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="RE2|linear"):
        reader.series(regex=r"(a)\1")


def test_a_trial_without_series_objects_is_read_from_its_indexes(tmp_path: Path) -> None:
    write_run(tmp_path, steps=30, flush_every=4)
    expected = rows_of(SeriesReader(tmp_path).series())
    series_dir = tmp_path / "workers" / "worker_0" / "series"
    objects = sorted(series_dir.iterdir())
    assert len(objects) >= 7
    for path in objects:  # as a trial written before series objects existed
        path.unlink()
    reader = SeriesReader(tmp_path)
    assert rows_of(reader.series()) == expected
    assert reader.problems == []


def test_damaged_series_objects_are_problems_and_read_from_indexes(tmp_path: Path) -> None:
    write_run(tmp_path, steps=30, flush_every=4)
    expected = rows_of(SeriesReader(tmp_path).series())
    objects = sorted((tmp_path / "workers" / "worker_0" / "series").iterdir())
    head = bytearray(objects[0].read_bytes())
    head[40] ^= 0xFF  # inside the header: the head's CRC fails
    objects[0].write_bytes(bytes(head))
    block = bytearray(objects[1].read_bytes())
    block[-3] ^= 0xFF  # inside the last block: that block's CRC fails
    objects[1].write_bytes(bytes(block))
    objects[3].write_bytes(objects[2].read_bytes())  # another segment's, copied here
    reader = SeriesReader(tmp_path)
    assert rows_of(reader.series()) == expected
    text = " ".join(reader.problems)
    assert "checksum" in text and "copied or moved" in text


def test_rollups_merge_small_segments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_series, "ROLLUP_SEGMENTS", 8)
    write_run(tmp_path, steps=60, flush_every=2)
    rollups = sorted((tmp_path / "workers" / "worker_0" / "rollups").iterdir())
    assert len(rollups) == 3  # 30 segments: 3 rollups of 8, 6 read one by one
    reader = SeriesReader(tmp_path)
    plan = reader.objects.workers["worker_0"].plan
    assert len(plan) == 3 + 6
    got = reader.series()
    assert rows_of(got) == rows_of(
        scalar_columns(
            tt.create_trial(tmp_path).parts, published_segments(tt.create_trial(tmp_path).parts)
        )
    )
    # a rollup's segments are not read: removing their own objects changes nothing
    first, last = layout.rollup_span(rollups[0].name) or (0, 0)
    for seq in range(first, last + 1):
        (tmp_path / "workers" / "worker_0" / "series" / f"{seq:012d}.ttser").unlink(missing_ok=True)
    assert rows_of(SeriesReader(tmp_path).series()) == rows_of(got)
    # a damaged rollup: its segments are read from their own objects, or their indexes
    damaged = bytearray(rollups[1].read_bytes())
    damaged[-5] ^= 0xFF
    rollups[1].write_bytes(bytes(damaged))
    reader = SeriesReader(tmp_path)
    assert rows_of(reader.series()) == rows_of(got)
    assert any("checksum" in p for p in reader.problems)
    assert rows_of(reader.series()) == rows_of(got)  # and it is not read again


def test_a_live_run_is_followed_and_only_published_steps_are_read(tmp_path: Path) -> None:
    hook = tt.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=1))
    reader = SeriesReader(tmp_path)
    assert reader.series().rows == 0 and reader.last_step == -1
    for step in range(10):
        hook.save_scalar("loss", float(step))
        hook.next_step()
    hook.flush()
    for step in range(10, 15):  # handed to the writer, not yet published
        hook.save_scalar("loss", float(step))
        hook.next_step()
    assert reader.refresh()
    assert list(reader.series("loss")["global_step"]) == list(range(10))
    assert reader.last_step == 9
    hook.close()
    reader.refresh()
    assert list(reader.series("loss")["value"]) == [float(s) for s in range(15)]
    assert not reader.refresh()


def test_workers_are_kept_apart(tmp_path: Path) -> None:
    write_run(tmp_path, steps=12, worker=0)
    write_run(tmp_path, steps=12, worker=1)
    got = SeriesReader(tmp_path).series("loss", mode="TRAIN")
    assert sorted(set(got["worker"])) == ["worker_0", "worker_1"]
    assert got.rows == 2 * 9
    assert SeriesReader(tmp_path).series("loss", worker="worker_1").rows == 12


def test_buckets_of_a_long_series(tmp_path: Path) -> None:
    hook = tt.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=1))
    for step in range(1000):
        hook.save_scalar("loss", float(step % 100))
        hook.next_step()
    hook.close()
    buckets = SeriesReader(tmp_path).buckets("loss", count=10)
    assert buckets.rows == 10
    assert list(buckets["first_step"]) == list(range(0, 1000, 100))
    assert list(buckets["max"]) == [99.0] * 10 and list(buckets["count"]) == [100] * 10
    zoom = SeriesReader(tmp_path).buckets("loss", start=500, end=600, count=4)
    assert list(zoom["first_step"]) == [500, 525, 550, 575]
    assert list(zoom["last"]) == [24.0, 49.0, 74.0, 99.0]


values = st.floats(allow_nan=True, allow_infinity=True, width=64)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5000), values), min_size=1, max_size=200),
    st.integers(1, 50),
)
def test_buckets_agree_with_a_plain_loop(points: list[tuple[int, float]], count: int) -> None:
    points.sort(key=lambda p: p[0])
    steps = np.array([p[0] for p in points], np.int64)
    vals = np.array([p[1] for p in points], np.float64)
    lo, hi = int(steps[0]), int(steps[-1]) + 1
    first, last, counts, low, high, last_value, bad = bucketed(steps, vals, lo, hi, count)
    width = max(1, -(-(hi - lo) // count))
    assert len(first) <= count
    for k in range(len(first)):
        inside = [(s, v) for s, v in points if (s - lo) // width == (first[k] - lo) // width]
        assert counts[k] == len(inside)
        assert last[k] == inside[-1][0]
        assert last_value[k] == inside[-1][1] or (
            math.isnan(last_value[k]) and math.isnan(inside[-1][1])
        )
        finite = [v for _, v in inside if math.isfinite(v)]
        assert bad[k] == len(inside) - len(finite)
        if finite:
            assert low[k] == min(finite) and high[k] == max(finite)
        else:
            assert math.isnan(low[k]) and math.isnan(high[k])
    assert int(counts.sum()) == len(points)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 300), values), min_size=1, max_size=40),
        min_size=1,
        max_size=6,
    ),
    st.integers(1, 20),
)
def test_buckets_merged_from_pieces_equal_buckets_of_all(
    pieces: list[list[tuple[int, float]]], count: int
) -> None:
    """Pieces read one after another (each sorted by step; steps may repeat across pieces,
    as a session that saved a step again): their buckets merged equal the buckets of all the
    rows sorted stably by step, as one read of everything gives them."""
    for piece in pieces:
        piece.sort(key=lambda p: p[0])
    rows = sorted((p for piece in pieces for p in piece), key=lambda p: p[0])
    lo = min(p[0] for p in rows)
    hi = max(p[0] for p in rows) + 1

    def cut(points: list[tuple[int, float]]) -> tuple[np.ndarray, ...]:
        steps = np.array([p[0] for p in points], np.int64)
        return bucketed(steps, np.array([p[1] for p in points], np.float64), lo, hi, count)

    merged = merge_buckets([cut(piece) for piece in pieces], lo, hi, count)
    whole = cut(rows)
    for got, want in zip(merged, whole, strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)  # NaN equal to NaN


def test_series_over_s3(s3_bucket: str) -> None:
    url = f"s3://{s3_bucket}/run"
    write_run(url, steps=16, flush_every=5)
    trial = tt.create_trial(url)
    assert rows_of(trial.series()) == rows_of(
        scalar_columns(trial.parts, published_segments(trial.parts))
    )


def test_export_takes_one_element_values_from_series_objects(tmp_path: Path) -> None:
    write_run(tmp_path, steps=20, flush_every=5)
    trial = tt.create_trial(tmp_path)
    expected = rows_of(scalar_columns(trial.parts, published_segments(trial.parts)))
    for path in (tmp_path / "workers" / "worker_0" / "data").iterdir():
        path.unlink()  # the losses' bytes are gone: their numbers are in the series objects
    trial = tt.create_trial(tmp_path)
    assert rows_of(scalar_columns(trial.parts, published_segments(trial.parts))) == expected


def test_a_small_head_budget_reads_the_same(tmp_path: Path) -> None:
    from tensortap.core._memory_budget import MemoryBudget

    write_run(tmp_path, steps=30, flush_every=3)
    expected = rows_of(SeriesReader(tmp_path).series())
    budget = MemoryBudget(1500)  # about one head at a time
    reader = SeriesReader(tmp_path, budget)
    assert rows_of(reader.series()) == expected
    assert rows_of(reader.series()) == expected and reader.problems == []
    assert budget.peak <= 1500 and budget.evicted > 0


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_damage_to_a_series_object_reads_the_same_numbers(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """Flipped bytes, a cut, or garbage in place of a series object: the reader never fails
    and never returns other numbers (a damaged object is read from its index instead)."""
    root = tmp_path_factory.mktemp("fuzz")
    write_run(root, steps=12, flush_every=6)
    expected = rows_of(SeriesReader(root).series())
    target = sorted((root / "workers" / "worker_0" / "series").iterdir())[0]
    raw = bytearray(target.read_bytes())
    how = data.draw(st.sampled_from(["flip", "cut", "garbage"]))
    if how == "flip":
        for at in data.draw(st.lists(st.integers(0, 10**6), min_size=1, max_size=4)):
            raw[at % len(raw)] ^= data.draw(st.integers(1, 255))
    elif how == "cut":
        raw = raw[: data.draw(st.integers(0, 10**6)) % len(raw)]
    else:
        raw = bytearray(data.draw(st.binary(max_size=200)))
    target.write_bytes(bytes(raw))
    reader = SeriesReader(root)
    assert rows_of(reader.series()) == expected
    assert reader.buckets(count=3).rows > 0


def test_rules_read_losses_from_the_series_path(tmp_path: Path) -> None:
    """A loss at every step is one bulk read, not a read of the data object per step: the
    rule judges the same with the data objects gone, and reads the first worker's loss."""
    from tensortap.rules._invoker import invoke_rule
    from tensortap.rules.builtin.loss_not_decreasing import LossNotDecreasing

    write_run(tmp_path, steps=24, worker=0)
    write_run(tmp_path, steps=24, worker=1)
    trial = tt.create_trial(tmp_path)
    for step in range(24):
        if step != 5:  # the inf
            expected = float(trial.tensor("loss").value(step))
            assert trial.numbers.at("loss", step) == pytest.approx(expected)
    before = invoke_rule(LossNotDecreasing(trial, num_steps=4))
    for worker in ("worker_0", "worker_1"):
        for path in (tmp_path / "workers" / worker / "data").iterdir():
            path.unlink()
    after = invoke_rule(LossNotDecreasing(tt.create_trial(tmp_path), num_steps=4))
    assert after.judged == before.judged > 0 and after.triggered == before.triggered
    assert after.errors == 0


def test_a_symlink_or_a_fifo_in_place_of_a_series_object_is_not_followed(tmp_path: Path) -> None:
    """A planted symlink (to a file outside the trial) or a FIFO (a read would block) where a
    series object belongs: never opened; the segment's numbers come from its index."""
    import os

    write_run(tmp_path / "run", steps=12, flush_every=4)
    expected = rows_of(SeriesReader(tmp_path / "run").series())
    outside = tmp_path / "outside.ttser"
    objects = sorted((tmp_path / "run" / "workers" / "worker_0" / "series").iterdir())
    outside.write_bytes(objects[0].read_bytes())
    objects[0].unlink()
    objects[0].symlink_to(outside)
    objects[1].unlink()
    os.mkfifo(objects[1])
    reader = SeriesReader(tmp_path / "run")
    assert rows_of(reader.series()) == expected
    plan = reader.objects.workers["worker_0"].plan
    assert all(source.key.endswith(".ttidx") for source in plan[:2])  # read from the indexes
