from __future__ import annotations

import pytest

from tensortap import Collection, CollectionManager, ReductionConfig, SaveConfig
from tensortap.core._collections import BUILTIN_COLLECTIONS
from tensortap.exceptions import InvalidConfigError


def test_include_exclude_and_explicit_names() -> None:
    coll = Collection("relu", include_regex=r"relu", exclude_regex=[r"input"])
    assert coll.matches("layer1/relu_output")
    assert not coll.matches("layer1/relu_input")
    assert not coll.matches("layer1/tanh")
    coll.add_tensor_name("layer1/relu_input")  # explicit names are never excluded
    assert coll.matches("layer1/relu_input")


def test_invalid_regex_fails_at_construction() -> None:
    with pytest.raises(InvalidConfigError, match=r"invalid include_regex '\(unclosed'"):
        Collection("c", include_regex="(unclosed")
    with pytest.raises(InvalidConfigError, match="exclude_regex"):
        Collection("c", exclude_regex="[")
    with pytest.raises(InvalidConfigError, match="collection name"):
        Collection("")


def test_dict_round_trip() -> None:
    coll = Collection(
        "g",
        include_regex=["grad"],
        exclude_regex=["bias"],
        tensor_names=["x"],
        save_config=SaveConfig(save_interval=3),
        reduction_config=ReductionConfig(norms=["l2"]),
    )
    back = Collection.from_dict(coll.to_dict())
    assert back.to_dict() == coll.to_dict()


def test_manager_is_per_instance_with_builtins() -> None:
    a, b = CollectionManager(), CollectionManager()
    assert set(BUILTIN_COLLECTIONS) <= set(a.names())
    a.get("custom").include("x")
    assert "custom" not in b
    assert a.get("all").matches("anything")
    version = a.version
    a.get("weights").add_tensor_name("w")
    assert a.version > version
    assert CollectionManager.from_dict(a.to_dict()).to_dict() == a.to_dict()


def test_a_name_near_a_known_collection_is_warned_about_never_refused(tmp_path, caplog) -> None:
    """Issue 43 reverses the refusal this test asserted before: a name the hook does not know
    is a new collection of one's own, as in smdebug; one close to a known name (a typo would
    save nothing) gets a warning naming the close one."""
    import tensortap as tt

    with caplog.at_level("WARNING", logger="tensortap.core._collections"):
        hook = tt.Hook(tmp_path / "t", include_collections=["losses", "gradient", "Weights"])
    hook.close()
    message = caplog.text
    assert "'gradient' (did you mean 'gradients'?)" in message
    assert "'Weights' (did you mean 'weights'?)" in message
    assert "hook.get_collection(name).include(regex)" in message  # what to do for one's own
    assert "gradient" in hook.collection_manager


def test_the_pytorch_hook_warns_with_its_own_collections(tmp_path, caplog) -> None:
    pytest.importorskip("torch")
    import tensortap.pytorch as ttp

    with caplog.at_level("WARNING", logger="tensortap.core._collections"):
        ttp.Hook(tmp_path / "t", include_collections=["relu_activation"]).close()
    assert "'relu_activation' (did you mean 'relu_activations'?)" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="tensortap.core._collections"):
        ttp.Hook(tmp_path / "ok", include_collections=["relu_activations", "training_loop"]).close()
    assert "did you mean" not in caplog.text


def test_smdebug_dead_relu_custom_collection_runs_unchanged(tmp_path) -> None:
    """smdebug's DeadRelu test pattern: a collection named in include_collections, defined
    once the hook is made, filled by a real PyTorch loop, judged by DeadRelu (it was refused
    with 'did you mean 'relu_activations'?')."""
    torch = pytest.importorskip("torch")
    import tensortap as tt
    import tensortap.pytorch as ttp
    from tensortap.rules import DeadRelu, invoke_rule

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    with torch.no_grad():
        net[0].bias.fill_(-100.0)  # every unit of the ReLU is dead from the start
    hook = ttp.Hook(
        tmp_path / "t",
        save_config=SaveConfig(save_interval=1),
        include_collections=["ReluActivation"],
    )
    hook.get_collection("ReluActivation").include([".*relu_output"])
    hook.register_module(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(8):
        loss = net(torch.randn(16, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    assert trial.tensor_names(collection="ReluActivation") == ["1/relu_output_0"]
    summary = invoke_rule(DeadRelu(trial), timeout=60)
    assert summary.judged == 8
    assert summary.triggered > 0


def test_collections_of_ones_own_are_no_typos(tmp_path) -> None:
    """Names unlike any known one are the user's, defined after the hook is made (smdebug's
    hook.get_collection(...).include(...), or save_tensor(..., collections=...)); a name like
    a known one is the user's when configured or added as a Collection."""
    import numpy as np

    import tensortap as tt

    hook = tt.Hook(
        tmp_path / "t",
        save_config=SaveConfig(save_interval=1),
        include_collections=["losses", "one_weight", "grads_by_regex"],
    )
    hook.get_collection("one_weight").add("fc2.weight")
    hook.add_collection(Collection("weight", include_regex="^fc1"))  # nearly 'weights'
    hook.save_tensor("fc2.weight", np.ones(2))
    hook.save_tensor("fc1.bias", np.ones(2))
    hook.save_tensor("mine", np.ones(2), collections="grads_by_regex")
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    assert sorted(trial.tensor_names()) == ["fc1.bias", "fc2.weight", "mine"]


def test_a_configured_collection_is_no_typo_but_an_unconfigured_one_is(tmp_path, caplog) -> None:
    """smdebug's CollectionConfig (seed 002's "all_tensors", or one named like a known
    collection) defines the name; include_collections naming nothing configured or known is
    warned about with the closest name."""
    import numpy as np

    import tensortap as tt

    config = tt.HookConfig.from_dict(
        {
            "out_dir": str(tmp_path / "t"),
            "hook_parameters": {"save_interval": "1"},
            "collection_configurations": [
                {"name": "weight", "parameters": {"include_regex": "^w"}},
                {"name": "all_tensors", "parameters": {"include_regex": ".*"}},
            ],
        }
    )
    made = config.create_hook(tt.Hook)
    made.save_tensor("w1", np.ones(2), collections=[])
    made.close()
    assert tt.create_trial(tmp_path / "t").tensor_names() == ["w1"]
    typo = tt.HookConfig.from_dict(
        {
            "out_dir": str(tmp_path / "u"),
            "hook_parameters": {"include_collections": "losses,gradient"},
            "collection_configurations": [{"name": "all_tensors"}],
        }
    )
    with caplog.at_level("WARNING", logger="tensortap.core._collections"):
        typo.create_hook(tt.Hook).close()  # warned about, not refused (issue 43, as smdebug)
    assert "did you mean 'gradients'" in caplog.text
