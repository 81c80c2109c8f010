"""Numerics statistics for low precision (amax, dynamic range, non-finite count, underflow and
overflow shares per format): their values, the PyTorch hook's equal to the core's, saved and
read back through a trial, and their format codes fixed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensortap as tt
from tensortap.core._numerics import FORMATS, NUMERICS_REDUCTIONS
from tensortap.core._reductions import compute_reduction
from tensortap.exceptions import InvalidConfigError
from tensortap.format._index import REDUCTION_CODES

torch = pytest.importorskip("torch")
from tensortap.pytorch._convert import reduce_many  # noqa: E402

X = np.array([1e-8, 0.0, 3.0, 500.0, np.nan, -1e-3, np.inf], np.float64)


def test_values_by_hand() -> None:
    got = {name: compute_reduction(X, name) for name in NUMERICS_REDUCTIONS}
    assert got["amax"] == 500.0  # finite values only
    assert got["dynamic_range"] == pytest.approx(np.log2(500.0) - np.log2(1e-8))
    assert got["nonfinite"] == 2.0
    assert got["underflow_bf16"] == 0.0  # 1e-8 is a normal bfloat16
    assert got["underflow_fp16"] == pytest.approx(1 / 7)  # 1e-8 < 2**-14
    assert got["underflow_fp8_e4m3"] == pytest.approx(2 / 7)  # and 1e-3 < 2**-6
    assert got["overflow_fp16"] == 0.0 and got["overflow_fp8_e5m2"] == 0.0
    assert got["overflow_fp8_e4m3"] == pytest.approx(1 / 7)  # 500 > 448
    assert compute_reduction(np.zeros(4), "dynamic_range") == 0.0
    assert compute_reduction(np.zeros(0), "amax") == 0.0
    assert compute_reduction(np.zeros(0), "underflow_fp16") == 0.0
    assert FORMATS["fp16"].largest == float(np.finfo(np.float16).max)
    assert FORMATS["fp16"].smallest_normal == float(np.finfo(np.float16).tiny)


def test_codes_are_fixed_and_config_takes_them_in_reductions_only() -> None:
    assert REDUCTION_CODES["l2"] == 9 and REDUCTION_CODES["amax"] == 10  # never renumbered
    assert REDUCTION_CODES["overflow_fp8_e5m2"] == 19
    config = tt.ReductionConfig(reductions=["amax", "underflow_bf16", "nonfinite"])
    assert ("amax", False) in config.reduction_specs
    with pytest.raises(InvalidConfigError, match="abs_reductions"):
        tt.ReductionConfig(abs_reductions=["amax"])


magnitudes = st.sampled_from([0.0, 1e-40, 1e-9, 1e-5, 1e-3, 0.5, 3.0, 500.0, 7e4, np.nan, np.inf])


@settings(max_examples=150, deadline=None)
@given(
    hnp.arrays(
        np.float32, hnp.array_shapes(min_dims=0, max_dims=2, max_side=6), elements=magnitudes
    ),
    st.booleans(),
)
def test_the_pytorch_hook_computes_what_the_core_does(values: np.ndarray, negate: bool) -> None:
    values = np.asarray(-values if negate else values)
    got = reduce_many(torch.from_numpy(values), tuple((n, False) for n in NUMERICS_REDUCTIONS))
    for name, value in zip(NUMERICS_REDUCTIONS, got, strict=True):
        assert float(value) == pytest.approx(compute_reduction(values, name), rel=1e-6), name


def test_saved_by_the_pytorch_hook_and_read_back(tmp_path: Path) -> None:
    import tensortap.pytorch as ttp
    from tests.helpers.torch_models import Net, batches, make

    model = make(Net)
    hook = ttp.Hook(
        tmp_path / "run",
        save_config=ttp.SaveConfig(save_interval=1),
        reduction_config=ttp.ReductionConfig(
            reductions=list(NUMERICS_REDUCTIONS), save_raw_tensor=True
        ),
        include_collections=["gradients"],
    )
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for xb, yb in batches(16, 2):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    hook.close()
    tensor = tt.create_trial(tmp_path / "run").tensor("gradient/fc2.weight")
    for step in tensor.steps():
        raw = tensor.value(step)
        for name in NUMERICS_REDUCTIONS:
            assert tensor.reduction_value(step, name) == pytest.approx(
                compute_reduction(raw, name), rel=1e-5, abs=1e-12
            ), name
