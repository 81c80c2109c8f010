"""LowPrecisionRange: warns when a tensor would overflow or underflow a low-precision format,
from raw values or from the numerics reductions alone; NaN is a problem as everywhere."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.exceptions import InvalidConfigError
from tensortap.rules import LowPrecisionRange, invoke_rule, iter_findings
from tensortap.rules._finding import Severity


def gradients(path: Path, values: list[np.ndarray], reductions_only: bool = False) -> tt.Trial:
    config = (
        tt.ReductionConfig(reductions=["amax", "underflow_fp8_e4m3", "underflow_bf16"])
        if reductions_only
        else None
    )
    hook = tt.Hook(
        path,
        save_config=tt.SaveConfig(save_interval=1),
        reduction_config=config,
        include_collections=["gradients"],
    )
    for value in values:
        hook.save_tensor("gradient/fc.weight", value, collections="gradients")
        hook.next_step()
    hook.close()
    return tt.create_trial(path)


def findings(trial: tt.Trial, **params) -> list:
    return [f for f in iter_findings(LowPrecisionRange(trial, **params)) if f.triggered]


def test_overflow_is_warned_before_it_happens(tmp_path: Path) -> None:
    ramp = [np.linspace(-v, v, 50, dtype=np.float32) for v in (50.0, 150.0, 300.0)]
    fired = findings(gradients(tmp_path / "t", ramp), dtype="fp8_e4m3")
    assert [f.step for f in fired] == [2]  # 300 > 448 / 2; 150 is not
    assert fired[0].severity is Severity.WARNING and "will overflow" in fired[0].message
    assert not findings(gradients(tmp_path / "t2", ramp), dtype="fp16")


def test_underflow_from_the_saved_reductions_alone(tmp_path: Path) -> None:
    small = np.full(100, 0.1, np.float32)
    small[:30] = 1e-4  # below float8 e4m3's smallest normal (2**-6), fine for bfloat16
    trial = gradients(tmp_path / "t", [small], reductions_only=True)
    assert not trial.step_block(0).has_raw("gradient/fc.weight")  # reductions only
    (fired,) = findings(trial, dtype="fp8_e4m3")
    assert "30.0% of gradient/fc.weight" in fired.message and fired.value == pytest.approx(0.3)
    assert not findings(trial, dtype="bf16")


def test_real_bf16_gradients_of_a_healthy_model_fit(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import tensortap.pytorch as ttp

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    hook = ttp.Hook(
        tmp_path / "run",
        save_config=ttp.SaveConfig(save_interval=1),
        include_collections=["gradients"],
    )
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(torch.randn(8, 16)).float().pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    hook.close()
    summary = invoke_rule(LowPrecisionRange(tt.create_trial(tmp_path / "run"), dtype="bf16"))
    assert summary.status.value == "NoIssuesFound" and summary.evaluated == 3


def test_nan_is_a_problem_and_bad_parameters_are_refused(tmp_path: Path) -> None:
    trial = gradients(tmp_path / "t", [np.array([1.0, np.nan], np.float32)])
    (fired,) = findings(trial)
    assert fired.severity is Severity.PROBLEM and "NaN" in fired.message
    for bad in ({"dtype": "fp4"}, {"headroom": 0.5}, {"underflow_share": 2}):
        with pytest.raises(InvalidConfigError, match="LowPrecisionRange"):
            LowPrecisionRange(trial, **bad)
