from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tensortap import ReductionConfig
from tensortap.core._reductions import compute_reduction
from tensortap.exceptions import InvalidConfigError

REFERENCE: dict[str, Callable[[np.ndarray], Any]] = {
    "min": np.min,
    "max": np.max,
    "mean": np.mean,
    "std": np.std,
    "variance": np.var,
    "sum": np.sum,
    "prod": np.prod,
    "l1": lambda x: np.sum(np.abs(x)),
    "l2": lambda x: np.sqrt(np.sum(x * x)),
}

arrays = st.builds(
    lambda values, dtype: values.astype(dtype),
    hnp.arrays(
        dtype=np.int64,
        shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=5),
        elements=st.integers(-20, 20),
    ),
    st.sampled_from([np.float32, np.float64, np.int32, np.int8, np.float16, np.uint8]),
)


@given(arrays, st.sampled_from(sorted(REFERENCE)), st.booleans())
def test_matches_numpy_reference(array, name, on_abs) -> None:
    x = array.astype(np.float64)
    if on_abs:
        x = np.abs(x)
    expected = float(REFERENCE[name](x))
    assert compute_reduction(array, name, on_abs) == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_edge_cases() -> None:
    empty = np.zeros((0, 3), np.float32)
    assert math.isnan(compute_reduction(empty, "min"))
    assert math.isnan(compute_reduction(empty, "mean"))
    assert compute_reduction(empty, "sum") == 0.0
    assert compute_reduction(empty, "prod") == 1.0
    assert compute_reduction(empty, "l2") == 0.0
    assert math.isnan(compute_reduction(np.array([1.0, np.nan]), "max"))
    assert compute_reduction(np.array([3 + 4j]), "max") == 5.0
    assert compute_reduction(np.array([True, False, True]), "sum") == 2.0


def test_unknown_names_rejected() -> None:
    with pytest.raises(InvalidConfigError, match="unknown reduction 'median'"):
        compute_reduction(np.ones(3), "median")
    with pytest.raises(
        InvalidConfigError, match=r"unknown name 'median' in reductions; accepted: min"
    ):
        ReductionConfig(reductions=["median"])
    with pytest.raises(InvalidConfigError, match="norms"):
        ReductionConfig(norms=["l3"])
    with pytest.raises(InvalidConfigError, match="save_shape"):
        ReductionConfig(save_shape="yes")  # type: ignore[arg-type]


@given(
    st.lists(st.sampled_from(["min", "max", "mean", "std"]), max_size=3),
    st.lists(st.sampled_from(["l1", "l2"]), max_size=2),
    st.booleans(),
    st.booleans(),
)
def test_reduction_config_round_trip(reductions, norms, raw, shape) -> None:
    cfg = ReductionConfig(reductions=reductions, norms=norms, save_raw_tensor=raw, save_shape=shape)
    assert ReductionConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.saves_raw == (raw or not (reductions or norms or shape))
