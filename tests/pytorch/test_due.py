"""The hook walks parameters, gradients and optimizer state only on steps where a due
collection can hold them: the default configuration (losses every step) never asks about a
weight, while a collection that names one weight, or matches gradients by regex, still gets it."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import tensortap.pytorch as tt  # noqa: E402
from tests.helpers.torch_models import Net, batches, make  # noqa: E402


def _train(hook: tt.Hook, steps: int = 3) -> list[str]:
    asked: list[str] = []
    begin = hook._recorder.begin

    def spy(name, collections=None):
        asked.append(name)
        return begin(name, collections)

    hook._recorder.begin = spy  # type: ignore[method-assign]
    model = make(Net)
    hook.register_module(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for x, y in batches(16, steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    hook.close()
    return asked


def test_losses_only_never_walk_parameters_gradients_or_optimizer_state(tmp_path: Path) -> None:
    hook = tt.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=1))
    asked = {name for name in _train(hook) if not name.startswith("vitals/")}
    assert asked == {"loss"}  # the vital signs are a few scalars, never a walk
    assert tt.create_trial(tmp_path).tensor("loss").steps() == [0, 1, 2]


def test_a_collection_naming_a_weight_or_matching_gradients_still_gets_them(
    tmp_path: Path,
) -> None:
    hook = tt.Hook(
        tmp_path,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["losses", "one_weight", "grads_by_regex"],
    )
    hook.get_collection("one_weight").add("fc2.weight")
    hook.get_collection("grads_by_regex").include("^gradient/fc3")
    _train(hook)
    names = tt.create_trial(tmp_path).tensor_names()
    assert {"fc2.weight", "gradient/fc3.weight", "gradient/fc3.bias"} <= set(names)
    assert "fc1.weight" not in names and "gradient/fc1.weight" not in names


def test_gradients_alone_walk_neither_weights_nor_optimizer_state(tmp_path: Path) -> None:
    hook = tt.Hook(
        tmp_path, save_config=tt.SaveConfig(save_interval=1), include_collections=["gradients"]
    )
    asked = set(_train(hook)) - {"loss"}  # the loss of a backward pass is always offered
    assert asked == {f"gradient/fc{i}.{p}" for i in (1, 2, 3) for p in ("weight", "bias")}


def test_all_keeps_smdebugs_meaning_and_leaves_optimizer_state_out(tmp_path: Path) -> None:
    """smdebug's ``all`` saved what the hook sees of the model (weights, gradients, inputs and
    outputs, losses), never the optimizer's state: Adam's two moments would add twice the
    model's size to every step. ``optimizer_variables`` included by name still saves it."""
    hook = tt.Hook(
        tmp_path / "all", save_config=tt.SaveConfig(save_interval=1), include_collections=["all"]
    )
    asked = set(_train(hook))
    assert not {n for n in asked if n.startswith("optimizer/")}
    names = set(tt.create_trial(tmp_path / "all").tensor_names())
    assert {"fc1.weight", "gradient/fc1.weight", "Net_output_0", "loss"} <= names
    assert not {n for n in names if n.startswith("optimizer/")}

    hook = tt.Hook(
        tmp_path / "both",
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["all", "optimizer_variables"],
    )
    _train(hook)
    names = set(tt.create_trial(tmp_path / "both").tensor_names())
    assert {"optimizer/state/fc1.weight/exp_avg", "optimizer/group_0/lr", "fc1.weight"} <= names
