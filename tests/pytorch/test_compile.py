"""torch.compile: a compiled model registered with the hook keeps whole graphs (no graph break)
and saves what the uncompiled model saves; module inputs and outputs are refused for it with a
clear message; a model compiled after registration still trains and a warning says how to avoid
its graph breaks. Per-module hooks exist only on steps where module I/O can be saved."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

import tensortap.pytorch as tt  # noqa: E402
from tensortap.core._vitals import Vital  # noqa: E402
from tensortap.exceptions import InvalidConfigError  # noqa: E402
from tests.helpers.torch_models import Net, batches, make  # noqa: E402

COLLECTIONS = ["weights", "biases", "gradients", "losses", "optimizer_variables"]
# wall-clock vital signs: saved by both runs, but no two runs take the same time
CLOCKED = {Vital.STEP_TIME, Vital.SAMPLES_PER_SECOND}


def _train(out: Path, compiled: bool, register_compiled: bool = True, steps: int = 4) -> None:
    model = make(Net)
    hook = tt.Hook(out, save_config=tt.SaveConfig(save_interval=1), include_collections=COLLECTIONS)
    runner: nn.Module = model
    if compiled:
        runner = torch.compile(model, backend="eager")
    hook.register_module(runner if register_compiled else model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for x, y in batches(32, steps):
        opt.zero_grad()
        nn.functional.cross_entropy(runner(x), y).backward()
        opt.step()
    hook.close()


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def test_a_registered_compiled_model_keeps_whole_graphs_and_saves_the_same(tmp_path: Path) -> None:
    _train(tmp_path / "compiled", compiled=True)
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1
    _train(tmp_path / "eager", compiled=False)
    want, got = tt.create_trial(tmp_path / "eager"), tt.create_trial(tmp_path / "compiled")
    assert sorted(got.tensor_names()) == sorted(want.tensor_names())
    assert got.steps() == want.steps() == [0, 1, 2, 3]
    for name in set(want.tensor_names()) - CLOCKED:
        for step in want.tensor(name).steps():
            np.testing.assert_allclose(
                got.tensor(name).value(step), want.tensor(name).value(step), rtol=1e-5, atol=1e-6
            )


@pytest.mark.parametrize("collection", ["relu_activations", "outputs", "inputs"])
def test_module_io_of_a_compiled_model_is_refused_at_registration(
    tmp_path: Path, collection: str
) -> None:
    hook = tt.Hook(tmp_path, include_collections=["losses", collection])
    with pytest.raises(InvalidConfigError, match="break its graphs at every layer") as err:
        hook.register_module(torch.compile(make(Net), backend="eager"))
    assert collection in str(err.value) and "Leave those collections out" in str(err.value)
    hook.close()


def test_a_model_compiled_after_registration_trains_and_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import tensortap.pytorch._compiled as compiled

    compiled._warned = False
    with caplog.at_level(logging.WARNING, logger="tensortap.pytorch._compiled"):
        _train(tmp_path, compiled=True, register_compiled=False)
    assert "Register the compiled module instead" in caplog.text
    assert sum(counters["graph_break"].values()) > 0  # what registering the wrapper avoids
    trial = tt.create_trial(tmp_path)
    assert trial.steps() == [0, 1, 2, 3]
    assert "gradient/fc1.weight" in trial.tensor_names()


def test_per_module_hooks_exist_only_while_module_io_can_be_saved(tmp_path: Path) -> None:
    model = make(Net)
    seen: list[int] = []
    probe = model.fc1.register_forward_pre_hook(lambda m, a: seen.append(len(m._forward_hooks)))
    hook = tt.Hook(tmp_path, include_collections=["losses", "outputs"])
    hook.get_collection("outputs").save_config = tt.SaveConfig(save_steps=[1])
    hook.register_module(model)
    for x, _ in batches(8, 3):
        model(x).sum().backward()
    probe.remove()
    hook.close()
    assert seen == [0, 1, 0]  # losses are due every step, outputs at step 1 only
    assert tt.create_trial(tmp_path).tensor("fc1_output_0").steps() == [1]


def test_a_compiled_model_saved_with_all_skips_module_io_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = make(Net)
    runner = torch.compile(model, backend="eager")
    hook = tt.Hook(
        tmp_path, save_config=tt.SaveConfig(save_interval=1), include_collections=["all"]
    )
    hook.register_module(runner)
    with caplog.at_level(logging.WARNING, logger="tensortap.pytorch._module_io"):
        for x, y in batches(16, 2):
            nn.functional.cross_entropy(runner(x), y).backward()
    hook.close()
    assert "module inputs and outputs of a torch.compile'd model are not saved" in caplog.text
    assert sum(counters["graph_break"].values()) == 0
    names = tt.create_trial(tmp_path).tensor_names()
    assert "fc1.weight" in names and "gradient/fc1.weight" in names
    assert not [n for n in names if "_output_" in n or "_input_" in n]
