"""Zero code change: `python -m tensortap.attach --config hook.json train.py` on a script that
never imports tensortap; configuration from JSON; get_hook()."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import tensortap.pytorch as tt
from tensortap.hook._config import CONFIG_ENV
from tests.helpers.torch_models import Net, batches, make

HELPERS = Path(__file__).parents[1] / "helpers"


def write_config(path: Path, out_dir: Path, **hook_parameters) -> Path:
    config = {
        "out_dir": str(out_dir),
        "hook_parameters": {"save_interval": "2", **hook_parameters},
        "collection_configurations": [
            {"name": "weights"},
            {"name": "gradients"},
            {"name": "losses", "parameters": {"save_interval": "1"}},
        ],
    }
    path.write_text(json.dumps(config))
    return path


def attach(config: Path, *script_args, env=None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "tensortap.attach", "--config", str(config)]
    cmd += [str(HELPERS / "zcc_train.py"), *map(str, script_args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def test_unmodified_script_with_a_compiled_model_is_hooked(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = attach(write_config(tmp_path / "hook.json", out), 4, "functional", 1, "compile")
    assert result.returncode == 0, result.stderr
    printed = [float(line.split()[-1]) for line in result.stdout.splitlines()]
    trial = tt.create_trial(out)
    assert trial.steps(mode=tt.modes.TRAIN) == list(range(4))
    loss = trial.tensor("loss")
    np.testing.assert_allclose(
        [loss.value(s, mode=tt.modes.TRAIN) for s in range(4)], printed, rtol=1e-5
    )
    assert "gradient/fc1.weight" in trial.tensor_names(collection="gradients")


@pytest.mark.parametrize("loss_kind", ["functional", "module"])
def test_unmodified_script_is_hooked(tmp_path: Path, loss_kind: str) -> None:
    out = tmp_path / "run"
    result = attach(write_config(tmp_path / "hook.json", out), 6, loss_kind, 1)
    assert result.returncode == 0, result.stderr
    printed = [float(line.split()[-1]) for line in result.stdout.splitlines()]
    assert len(printed) == 6
    trial = tt.create_trial(out)
    assert trial.steps(mode=tt.modes.TRAIN) == list(range(6))
    assert trial.steps(mode=tt.modes.EVAL) == [0]
    loss_name = "loss" if loss_kind == "functional" else "CrossEntropyLoss_output_0"
    loss = trial.tensor(loss_name)
    assert loss.steps(mode=tt.modes.TRAIN) == list(range(6))
    np.testing.assert_allclose(
        [loss.value(s, mode=tt.modes.TRAIN) for s in range(6)], printed, rtol=1e-5
    )
    assert set(trial.tensor_names(collection="weights")) == {
        "fc1.weight",
        "fc2.weight",
        "fc3.weight",
    }
    assert trial.tensor("gradient/fc1.weight").steps(mode=tt.modes.TRAIN) == [0, 2, 4]
    assert trial.workers() == ["worker_0"]
    assert trial.worker_status("worker_0") is not None  # closed at exit: end marker written
    assert not trial.problems()


def test_gradient_accumulation_is_counted_in_optimizer_steps(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = attach(write_config(tmp_path / "hook.json", out), 4, "functional", 3)
    assert result.returncode == 0, result.stderr
    assert tt.create_trial(out).steps(mode=tt.modes.TRAIN) == [0, 1, 2, 3]


@pytest.mark.parametrize("loss_kind", ["functional", "functional-undivided", "module-summed"])
def test_accumulation_of_whole_functional_losses_is_counted(tmp_path: Path, loss_kind: str) -> None:
    """Issue 44 (stranger c/13, Lightning manual optimization): three backward passes, each on
    a whole ``F.cross_entropy``, before one optimizer step sum the micro-batches' gradients.
    Zero code change knows a wrapped functional loss's result as a whole loss, as it knows a
    loss module's output; the same loss divided by 3 is no such fact."""
    out = tmp_path / "run"
    config = write_config(tmp_path / "hook.json", out)
    spec = json.loads(config.read_text())
    spec["collection_configurations"].append({"name": "training_loop"})
    config.write_text(json.dumps(spec))
    result = attach(config, 4, loss_kind, 3)
    assert result.returncode == 0, result.stderr
    trial = tt.create_trial(out)
    names = trial.tensor_names(collection="training_loop")
    assert "training_loop/backward_passes" in names  # the facts were gathered
    if loss_kind == "functional":
        assert "training_loop/accumulation_undivided" not in names
        assert "training_loop/accumulation_summed" not in names
        return
    if loss_kind == "module-summed":  # each loss told of twice (module, functional): one loss
        summed = trial.tensor("training_loop/accumulation_summed/micro_batches")
        assert float(summed.value(summed.steps()[-1])) == 3
        return
    undivided = trial.tensor("training_loop/accumulation_undivided")
    assert float(undivided.value(undivided.steps()[-1])) == 4  # every optimizer step
    passes = trial.tensor("training_loop/accumulation_undivided/micro_batches")
    assert float(passes.value(passes.steps()[-1])) == 3


def test_attach_rejects_a_bad_config_before_the_script_runs(tmp_path: Path) -> None:
    config = tmp_path / "hook.json"
    config.write_text(json.dumps({"out_dir": str(tmp_path / "run"), "hook_parameters": {"x": 1}}))
    result = attach(config, 2, "functional", 1)
    assert result.returncode == 2
    assert "unknown parameter 'x'" in result.stderr
    assert "step 0" not in result.stdout


def test_create_from_json_file_and_get_hook(tmp_path: Path, monkeypatch) -> None:
    config = write_config(tmp_path / "hook.json", tmp_path / "run", include_regex="fc1_output")
    monkeypatch.setenv(CONFIG_ENV, str(config))
    previous = tt.get_hook()
    if previous is not None:
        previous.close()
    hook = tt.get_hook(create_if_not_exists=True)
    assert hook is not None and tt.get_hook() is hook
    model = make(Net)
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for xb, yb in batches(32, 3):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    hook.close()
    assert tt.get_hook() is None
    trial = tt.create_trial(tmp_path / "run")
    assert trial.tensor("fc1_output_0").steps() == [0, 2]  # include_regex joins `default`
    assert trial.tensor("loss").steps() == [0, 1, 2]  # losses: every step, per its own config
    assert trial.tensor("fc1.weight").steps() == [0, 2]
    again = tt.Hook.create_from_json_file(config, out_dir=str(tmp_path / "other"))
    assert again.out_dir.endswith("other")
    again.close()
