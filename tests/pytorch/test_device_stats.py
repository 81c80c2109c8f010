"""Statistics on accelerators: tensors saved together are reduced with multi-tensor kernels and
their values cross to the host in one buffer per step. The same code runs here on CPU tensors
(the converter's accelerator path forced on), and must give the core's values: each statistic,
each float dtype, NaN and infinities, grouped or one by one, and through a real training run."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensortap.core._numerics import NUMERICS_REDUCTIONS
from tensortap.core._recorder import SavePlan
from tensortap.core._reduction_config import ALLOWED_NORMS, ALLOWED_REDUCTIONS

pytest.importorskip("torch")
import torch

import tensortap.pytorch as tt
from tensortap.pytorch._convert import TorchConverter
from tests.helpers.reduction_checks import check_records, converted, tensor_lists
from tests.helpers.torch_models import Net, batches, make

SPECS = (
    *((name, False) for name in ALLOWED_REDUCTIONS + ALLOWED_NORMS + NUMERICS_REDUCTIONS),
    *((name, True) for name in ALLOWED_REDUCTIONS + ALLOWED_NORMS),
)


def _float32_slack(reduction: str, scale: float) -> float:
    return 1e-6 * scale ** (2 if reduction == "variance" else 1)  # float32 sums


@settings(max_examples=200, deadline=None)
@given(tensor_lists(1), st.booleans())
def test_grouped_statistics_equal_the_cores(tensors, grouped: bool) -> None:
    converter = TorchConverter()
    converter._cpu_as_device = True
    plan = SavePlan(raw=False, shape=False, reductions=SPECS)
    for records, t in converted(converter, tensors, plan, grouped):
        check_records(records, t, rel=2e-5, slack=_float32_slack)


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
