"""StepBlock: reading every tensor of a step at once answers exactly what Tensor answers."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensortap as tt
from tensortap.core._reductions import REDUCTION_NAMES, compute_reduction
from tensortap.exceptions import FormatError, NoMoreData, TensorUnavailableForStep
from tensortap.testing import TrialBuilder
from tensortap.trials._reader import MAX_GAP

DTYPES = ["<f2", "<f4", "<f8", "<i4", "u1", "?", "<c8"]


def _arrays() -> st.SearchStrategy[np.ndarray]:
    def of(dtype: str) -> st.SearchStrategy[np.ndarray]:
        shape = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)
        return hnp.arrays(np.dtype(dtype), shape)

    return st.sampled_from(DTYPES).flatmap(of)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(_arrays(), min_size=1, max_size=6), on_abs=st.booleans())
def test_reductions_match_the_one_tensor_path(values: list[np.ndarray], on_abs: bool) -> None:
    """Any mix of dtypes, shapes (empty and scalar too), NaN and inf: every reduction of the
    block equals compute_reduction of the value Tensor reads back."""
    with tempfile.TemporaryDirectory() as tmp:
        builder = TrialBuilder(Path(tmp) / "t")
        builder.step({f"t{i}": v for i, v in enumerate(values)}, collections={})
        trial = builder.close()
        names = [f"t{i}" for i in range(len(values))][::-1]  # not in saved order
        block = trial.step_block(0)
        assert block.names() == sorted(names)
        for reduction in REDUCTION_NAMES:
            got = block.reduce(names, reduction, abs=on_abs)
            want = [compute_reduction(trial.tensor(n).value(0), reduction, on_abs) for n in names]
            np.testing.assert_allclose(got, want, rtol=1e-9, equal_nan=True)
        nans, infs = block.nonfinite(names)
        zeros, sizes = block.count_where(names, lambda x: x == 0), block.sizes(names)
        for i, (name, nan, inf) in enumerate(zip(names, nans, infs, strict=True)):
            value = trial.tensor(name).value(0)
            np.testing.assert_array_equal(block.value(name), value)
            assert (zeros[i], sizes[i]) == (np.count_nonzero(value == 0), value.size)
            kind_ok = value.dtype.kind in "fc"
            assert nan == (np.count_nonzero(np.isnan(value)) if kind_ok else 0)
            assert inf == (np.count_nonzero(np.isinf(value)) if kind_ok else 0)


def test_bfloat16_is_read_as_float32(tmp_path: Path) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    value = np.array([1.5, -2.0, np.nan], dtype=ml_dtypes.bfloat16)
    builder = TrialBuilder(tmp_path / "t")
    builder.step({"b": value, "f": np.ones(3, np.float32)})
    block = builder.close().step_block(0)
    assert block.value("b").dtype == np.float32
    np.testing.assert_array_equal(block.reduce(["b", "f"], "max"), [np.nan, 1.0])
    assert block.nonfinite(["b", "f"])[0].tolist() == [1, 0]


def test_saved_reductions_answer_first_and_missing_ones_are_explained(tmp_path: Path) -> None:
    config = tt.ReductionConfig(reductions=["max"], abs_reductions=["mean"])
    builder = TrialBuilder(tmp_path / "t", reduction_config=config)
    builder.step({"gradient/a": np.array([-3.0, 1.0]), "gradient/b": np.array([2.0, 4.0])})
    block = builder.close().step_block(0)
    names = ["gradient/a", "gradient/b"]
    assert block.reduce(names, "max").tolist() == [1.0, 4.0]
    assert block.reduce(names, "mean", abs=True).tolist() == [2.0, 3.0]
    assert not block.has_raw("gradient/a")
    assert block.saved_reductions("gradient/a") == {("max", False): 1.0, ("mean", True): 2.0}
    with pytest.raises(TensorUnavailableForStep, match=r"neither the reduction min .* max"):
        block.reduce(names, "min")
    with pytest.raises(TensorUnavailableForStep, match="only reductions"):
        block.value("gradient/a")
    assert block.nonfinite([]) == (pytest.approx([]), pytest.approx([]))  # type: ignore[comparison-overlap]


def test_names_filters_and_order(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path / "t")
    builder.step({"z.weight": np.ones(2), "gradient/z.weight": np.ones(2), "a.weight": np.ones(2)})
    builder.step({"a.weight": np.ones(2)})
    trial = builder.close()
    block = trial.step_block(0)
    assert block.saved_order() == ["z.weight", "gradient/z.weight", "a.weight"]
    assert block.names() == ["a.weight", "gradient/z.weight", "z.weight"]
    assert block.names(collection="weights") == ["a.weight", "z.weight"]
    assert block.names(regex="^gradient") == ["gradient/z.weight"]
    assert "a.weight" in block and "nope" not in block
    assert trial.step_block(1).names(collection="gradients") == []
    with pytest.raises(TensorUnavailableForStep, match="'nope' was not saved at step 0"):
        block.reduce(["nope"], "mean")
    with pytest.raises(NoMoreData, match="step 7"):
        trial.step_block(7)
    with pytest.raises(tt.exceptions.InvalidConfigError, match="unknown reduction 'median'"):
        block.reduce(["a.weight"], "median")


def test_far_apart_values_are_read_in_separate_runs(tmp_path: Path) -> None:
    """Values closer than MAX_GAP share one request; a big unrequested tensor between two
    requested ones is not read."""
    builder = TrialBuilder(tmp_path / "t")
    big = np.zeros(MAX_GAP // 4 + 1024, dtype=np.float32)
    builder.step({"a": np.arange(3.0), "b": np.arange(4.0), "big": big, "c": np.arange(5.0)})
    trial = builder.close()
    reads: list[int] = []
    original = trial.store.get_ranges

    def counting(ranges):
        reads.extend(length for _, _, length in ranges)
        return original(ranges)

    trial.store.get_ranges = counting  # type: ignore[method-assign]
    block = trial.step_block(0)
    assert block.reduce(["c", "a", "b"], "sum").tolist() == [10.0, 3.0, 6.0]
    assert len(reads) == 2 and max(reads) < big.nbytes
    block.reduce(["a", "c"], "max")  # already read: no new request
    assert len(reads) == 2


def test_first_worker_answers(tmp_path: Path) -> None:
    for worker, value in ((1, 10.0), (0, 1.0)):
        builder = TrialBuilder(tmp_path / "t", worker=worker, num_workers=2)
        builder.step({"gradient/w": np.full(3, value), f"only_{worker}": np.full(2, value)})
        builder.close()
    block = tt.create_trial(tmp_path / "t").step_block(0)
    assert block.reduce(["gradient/w", "only_1"], "mean").tolist() == [1.0, 10.0]
    assert block.saved_order()[:2] == ["gradient/w", "only_0"]


def test_corrupt_bytes_are_refused(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path / "t")
    builder.step({"a": np.arange(8.0), "b": np.arange(8.0)})
    trial = builder.close()
    (data,) = (tmp_path / "t" / "workers" / "worker_0" / "data").iterdir()
    raw = bytearray(data.read_bytes())
    raw[70] ^= 0x40  # inside b's bytes (a's are the first 64)
    data.write_bytes(bytes(raw))
    block = tt.create_trial(tmp_path / "t").step_block(0)
    with pytest.raises(FormatError, match=r"\[64:128\] fails its checksum"):
        block.reduce(["a", "b"], "mean")
    assert trial.tensor("a").value(0).tolist() == list(range(8))


@pytest.mark.parametrize("batch_bytes", [1, 200, 1 << 20])
def test_iter_step_blocks_reads_ahead_in_batches_and_matches_step_block(
    tmp_path: Path, batch_bytes: int
) -> None:
    for worker in (0, 1):
        builder = TrialBuilder(tmp_path / "t", worker=worker, num_workers=2)
        for step in range(9):
            values = {"w": np.full(5, step + worker, np.float32), f"own{worker}": np.arange(step)}
            if step % 3 == 0:
                values["sometimes"] = np.ones((2, 2))
            builder.step(values)
        builder.close()
    trial = tt.create_trial(tmp_path / "t")
    reads: list[int] = []
    original = trial.store.get_ranges

    def counting(ranges):
        reads.append(len(ranges))
        return original(ranges)

    trial.store.get_ranges = counting  # type: ignore[method-assign]
    blocks = list(trial.iter_step_blocks(batch_bytes=batch_bytes))
    assert [b.step for b in blocks] == list(range(9))
    calls = len(reads)
    for block in blocks:  # every value was read ahead: no new request
        fresh = trial.step_block(block.step)
        for name in block.names():
            np.testing.assert_array_equal(block.value(name), fresh.value(name))
        np.testing.assert_array_equal(
            block.reduce(block.names(), "max"), fresh.reduce(fresh.names(), "max")
        )
    assert 1 <= calls <= 9
    if batch_bytes in (1, 1 << 20):  # a batch per step, or the whole trial in one
        assert calls == (9 if batch_bytes == 1 else 1)
    assert [b.step for b in trial.iter_step_blocks([4, 2])] == [4, 2]
    with pytest.raises(NoMoreData):
        list(trial.iter_step_blocks([99]))
    with pytest.raises(tt.exceptions.InvalidConfigError, match="batch_bytes"):
        list(trial.iter_step_blocks(batch_bytes=0))


def test_iter_step_blocks_refuses_corrupt_bytes(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path / "t")
    builder.step({"a": np.arange(8.0), "b": np.arange(8.0)})
    builder.close()
    (data,) = (tmp_path / "t" / "workers" / "worker_0" / "data").iterdir()
    raw = bytearray(data.read_bytes())
    raw[70] ^= 0x40
    data.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match=r"\[64:128\] fails its checksum"):
        list(tt.create_trial(tmp_path / "t").iter_step_blocks())
