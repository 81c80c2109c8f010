"""Every dtype and shape written by the hook reads back identically."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensortap as tt
from tensortap.storage import MemoryStore

DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
    ">f4",
    ">i8",
    "<c8",
]

arrays = hnp.arrays(
    dtype=st.sampled_from(DTYPES).map(np.dtype),  # type: ignore[arg-type]
    shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6),
)


def write_and_read(values: dict[str, Any]) -> tt.Trial:
    store = MemoryStore()
    with tt.Hook(store, save_config=tt.SaveConfig(save_interval=1)) as hook:
        for name, value in values.items():
            hook.save_tensor(name, value)
        hook.next_step()
    return tt.create_trial(store)


@given(st.lists(arrays, min_size=1, max_size=4))
def test_any_dtype_and_shape_round_trips(values) -> None:
    named = {f"t{i}": v for i, v in enumerate(values)}
    trial = write_and_read(named)
    for name, value in named.items():
        got = trial.tensor(name).value(0)
        assert got.shape == value.shape
        assert got.dtype == value.dtype.newbyteorder("=")
        np.testing.assert_array_equal(got, value)
        assert got.tobytes() == value.astype(value.dtype.newbyteorder("<")).tobytes()
        assert got.flags.writeable


def test_bfloat16_stored_exactly_read_as_float32() -> None:
    values = np.array([1.0, -2.5, 3.140625, 1e-38, np.inf, -0.0], dtype=ml_dtypes.bfloat16)
    trial = write_and_read({"b": values})
    got = trial.tensor("b").value(0)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, values.astype(np.float32))
    assert np.signbit(got[-1])


def test_float8_round_trips_with_ml_dtypes() -> None:
    values = np.array([0.5, -1.0, 2.0], dtype=ml_dtypes.float8_e4m3fn)
    got = write_and_read({"f8": values}).tensor("f8").value(0)
    assert got.dtype == values.dtype
    np.testing.assert_array_equal(got.astype(np.float32), values.astype(np.float32))


def test_python_scalars_and_lists() -> None:
    trial = write_and_read({"i": 3, "f": 2.5, "l": [[1, 2], [3, 4]]})
    assert trial.tensor("i").value(0) == 3
    assert trial.tensor("f").value(0).shape == ()
    np.testing.assert_array_equal(trial.tensor("l").value(0), [[1, 2], [3, 4]])


def test_saved_value_is_a_copy() -> None:
    store = MemoryStore()
    weights = np.zeros(4, np.float32)
    with tt.Hook(store, save_config=tt.SaveConfig(save_interval=1)) as hook:
        hook.save_tensor("w", weights)
        weights += 1  # the optimizer updates in place after the save
        hook.next_step()
    np.testing.assert_array_equal(tt.create_trial(store).tensor("w").value(0), np.zeros(4))


def test_non_contiguous_input() -> None:
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    view = base[:, ::2].T
    np.testing.assert_array_equal(write_and_read({"v": view}).tensor("v").value(0), view)
