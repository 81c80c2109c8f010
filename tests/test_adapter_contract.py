"""The contract every framework hook shares: the framework-free hook used like a framework's
says which hook to make."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import tensortap
from tensortap.exceptions import FrameworkHookNeeded, InvalidConfigError, TensortapError
from tensortap.hook import ADAPTER_METHODS


@pytest.mark.parametrize(
    ("method", "named"),
    [
        ("register_module", "tensortap.pytorch.Hook"),
        ("register_loss", "tensortap.pytorch.Hook"),
        ("register_optimizer", "tensortap.pytorch.Hook"),
        ("register_block", "tensortap.mxnet.Hook"),
        ("register_model", "tensortap.keras.KerasHook"),
        ("set_model", "tensortap.keras.KerasHook"),
        ("on_train_batch_end", "tensortap.keras.KerasHook"),
        ("after_iteration", "tensortap.xgboost.Hook"),
        ("save_pytree", "tensortap.jax.Hook"),
    ],
)
def test_framework_free_hook_used_like_a_framework_hook_names_it(
    tmp_path: Path, method: str, named: str
) -> None:
    with tensortap.Hook(tmp_path / "run") as hook:
        with pytest.raises(FrameworkHookNeeded, match=named) as info:
            getattr(hook, method)
        assert isinstance(info.value, AttributeError)
        assert isinstance(info.value, InvalidConfigError)
        assert isinstance(info.value, TensortapError)
        assert "tensortap.Hook (the framework-free hook)" in str(info.value)
        assert not hasattr(hook, method)
        assert getattr(hook, method, None) is None


def test_register_module_of_the_framework_free_hook_says_which_hook(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    hook = tensortap.Hook(tmp_path / "run")
    with pytest.raises(AttributeError, match=r"tensortap\.pytorch\.Hook\(out_dir"):
        hook.register_module(torch.nn.Linear(2, 2))
    hook.close()


def test_any_other_missing_attribute_is_a_plain_attribute_error(tmp_path: Path) -> None:
    hook = tensortap.Hook(tmp_path / "run")
    with pytest.raises(AttributeError) as info:
        _ = hook.no_such_thing
    assert type(info.value) is AttributeError
    hook.close()


@pytest.mark.parametrize("adapter", sorted(ADAPTER_METHODS))
def test_the_listed_methods_are_the_adapters(adapter: str) -> None:
    module, _, name = adapter.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        pytest.skip(f"{module} cannot be imported here: {exc}")
    smdebug_only = {"register_model"}  # KerasHook learns its model from Keras (set_model)
    missing = [m for m in ADAPTER_METHODS[adapter] if m not in smdebug_only and not hasattr(cls, m)]
    assert missing == []
