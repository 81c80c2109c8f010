"""Statistics on accelerators: tensors saved together are reduced with multi-tensor kernels and
their values cross to the host in one buffer per step. The same code runs here on CPU tensors
(the converter's accelerator path forced on), and must give the core's values: each statistic,
each float dtype, NaN and infinities, grouped or one by one, and through a real training run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tensortap.core._numerics import NUMERICS_REDUCTIONS
from tensortap.core._recorder import SavePlan
from tensortap.core._reduction_config import ALLOWED_NORMS, ALLOWED_REDUCTIONS
from tensortap.core._reductions import compute_reduction

pytest.importorskip("torch")
import torch

import tensortap.pytorch as tt
from tensortap.pytorch._convert import TorchConverter
from tests.helpers.torch_models import Net, batches, make

SPECS = (
    *((name, False) for name in ALLOWED_REDUCTIONS + ALLOWED_NORMS + NUMERICS_REDUCTIONS),
    *((name, True) for name in ALLOWED_REDUCTIONS + ALLOWED_NORMS),
)
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}
DTYPES["float16"] = torch.float16
VALUES = st.one_of(
    st.floats(-1e3, 1e3, width=16),
    st.sampled_from([0.0, 1e-6, -2.5, 600.0, float("nan"), float("inf"), -float("inf")]),
)


def _check(records, tensor: torch.Tensor) -> None:
    whole = tensor.double().numpy()
    finite = np.abs(whole[np.isfinite(whole)])
    scale = float(finite.max()) if finite.size else 0.0  # float32 sums err relative to it
    for rec in records:
        want = compute_reduction(whole, rec.reduction, rec.on_abs)
        where = (rec.name, rec.reduction, rec.on_abs)
        assert rec.deferred is None, where
        if np.isnan(want):
            assert np.isnan(rec.value), (where, rec.value)
        else:
            slack = 1e-6 * scale ** (2 if rec.reduction == "variance" else 1)
            assert rec.value == pytest.approx(want, rel=2e-5, abs=slack + 1e-30), where


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(sorted(DTYPES)),
            hnp.arrays(np.float64, st.integers(1, 30), elements=VALUES),
        ),
        min_size=1,
        max_size=6,
    ),
    st.booleans(),
)
def test_grouped_statistics_equal_the_cores(tensors, grouped: bool) -> None:
    converter = TorchConverter()
    converter._cpu_as_device = True
    plan = SavePlan(raw=False, shape=False, reductions=SPECS)
    saved = []
    with converter.together() if grouped else _nothing():
        for i, (dtype, values) in enumerate(tensors):
            t = torch.from_numpy(values).to(DTYPES[dtype])
            saved.append((converter.records(f"t{i}", t, plan), t))
    converter.resolve()
    for records, t in saved:
        _check(records, t)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _train(out: Path, accelerator_path: bool) -> None:
    model = make(Net)
    hook = tt.Hook(
        out,
        save_config=tt.SaveConfig(save_interval=1),
        reduction_config=tt.ReductionConfig(
            reductions=["min", "max", "mean", "amax"],
            abs_reductions=["max", "mean"],
            norms=["l1", "l2"],
        ),
        include_collections=["weights", "biases", "gradients"],
    )
    hook._converter._cpu_as_device = accelerator_path
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in batches(32, 3):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    hook.close()


def test_a_training_run_saves_the_same_statistics_on_either_path(tmp_path: Path) -> None:
    _train(tmp_path / "cpu", accelerator_path=False)
    _train(tmp_path / "device", accelerator_path=True)
    want, got = tt.create_trial(tmp_path / "cpu"), tt.create_trial(tmp_path / "device")
    assert sorted(got.tensor_names()) == sorted(want.tensor_names())
    assert "gradient/fc1.weight" in want.tensor_names()
    for name in want.tensor_names():
        for step in want.tensor(name).steps():
            for stat in ("min", "max", "mean", "amax", "l1", "l2"):
                assert got.tensor(name).reduction_value(step, stat) == pytest.approx(
                    want.tensor(name).reduction_value(step, stat), rel=1e-5
                ), (name, step, stat)
            for stat in ("max", "mean"):
                assert got.tensor(name).reduction_value(step, stat, abs=True) == pytest.approx(
                    want.tensor(name).reduction_value(step, stat, abs=True), rel=1e-5
                ), (name, step, stat)
