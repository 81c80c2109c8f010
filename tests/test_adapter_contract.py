"""The contract every framework hook shares: the framework-free hook used like a framework's
says which hook to make."""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tensortap
from tensortap import _shared as shared
from tensortap._faces import FACES
from tensortap.attach import FRAMEWORKS
from tensortap.exceptions import FrameworkHookNeeded, InvalidConfigError, TensortapError
from tensortap.hook._hook import ADAPTER_METHODS, HookOptions


def adapter_class(adapter: str) -> type[Any]:
    """The class ``tensortap.<framework>.<name>`` names (the test skips without the framework)."""
    module, _, name = adapter.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        pytest.skip(f"{module} cannot be imported here: {exc}")


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
        hook.register_module(torch.nn.Linear(2, 2))  # type: ignore[attr-defined]
    hook.close()


def test_any_other_missing_attribute_is_a_plain_attribute_error(tmp_path: Path) -> None:
    hook = tensortap.Hook(tmp_path / "run")
    with pytest.raises(AttributeError) as info:
        _ = hook.no_such_thing  # type: ignore[attr-defined]
    assert type(info.value) is AttributeError
    hook.close()


@pytest.mark.parametrize("adapter", sorted(ADAPTER_METHODS))
def test_the_listed_methods_are_the_adapters(adapter: str) -> None:
    cls = adapter_class(adapter)
    smdebug_only = {"register_model"}  # KerasHook learns its model from Keras (set_model)
    missing = [m for m in ADAPTER_METHODS[adapter] if m not in smdebug_only and not hasattr(cls, m)]
    assert missing == []


def _keyword_only(fn: object) -> dict[str, inspect.Parameter]:
    params = inspect.signature(fn).parameters  # type: ignore[arg-type]
    return {n: p for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}


def test_hook_options_are_the_base_hooks_keyword_only_arguments() -> None:
    params = inspect.signature(tensortap.Hook.__init__).parameters
    positional = [n for n, p in params.items() if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    assert positional == ["self", "out_dir"]
    assert set(_keyword_only(tensortap.Hook.__init__)) == set(HookOptions.__annotations__)


@pytest.mark.parametrize("adapter", sorted(ADAPTER_METHODS))
def test_each_adapter_adds_its_own_arguments_only(adapter: str) -> None:
    cls = adapter_class(adapter)
    params = inspect.signature(cls.__init__).parameters
    kinds = {n: p.kind for n, p in params.items()}
    assert list(kinds)[:2] == ["self", "out_dir"]
    assert kinds.pop("options") is inspect.Parameter.VAR_KEYWORD  # the shared options, as given
    own = set(_keyword_only(cls.__init__))
    assert own.isdisjoint(HookOptions.__annotations__)
    assert set(kinds) == {"self", "out_dir", *own}


def test_options_after_out_dir_are_keyword_only(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        tensortap.Hook(tmp_path / "a", tensortap.SaveConfig(save_interval=1))  # type: ignore[call-arg]
    hook = tensortap.Hook(tmp_path / "b", save_config=tensortap.SaveConfig(save_interval=1))
    hook.close()


def test_get_hook_is_the_open_hook_of_its_own_framework(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("xgboost")
    pytest.importorskip("torch")
    import tensortap.pytorch as pt
    import tensortap.xgboost as xgb

    current = xgb.get_hook()
    assert current is None or not current.closed
    torch_hook = pt.Hook(tmp_path / "torch")
    hook = xgb.Hook(tmp_path / "xgb")
    assert xgb.get_hook() is hook and pt.get_hook() is torch_hook
    assert tensortap.Hook.current() is None  # the framework-free hook's own entry
    hook.close()
    assert xgb.get_hook() is None  # a closed hook is no one's current hook
    assert pt.get_hook() is torch_hook
    torch_hook.close()

    config = tmp_path / "hook.json"
    config.write_text(json.dumps({"out_dir": str(tmp_path / "from_json")}))
    monkeypatch.setenv("TENSORTAP_CONFIG", str(config))
    made = xgb.get_hook(create_if_not_exists=True)
    assert isinstance(made, xgb.Hook) and xgb.get_hook() is made
    made.close()


FACE_NAMES = sorted(FACES)


@pytest.mark.parametrize("face", FACE_NAMES)
def test_each_face_exports_the_shared_names_and_its_own(face: str) -> None:
    module = importlib.import_module(face)
    assert sorted(module.__all__) == sorted({*shared.__all__, *FACES[face]})
    assert set(module.__all__) <= set(dir(module))


def python_prints(code: str) -> str:
    """What a fresh interpreter running ``code`` prints (it must succeed)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_the_faces_imports_no_framework() -> None:
    """Every name of a face loads at first use: ``import tensortap.pytorch`` costs no torch."""
    frameworks = ["torch", "keras", "tensorflow", "xgboost", "mxnet", "jax", "lightning"]
    frameworks += ["transformers"]
    code = (
        "import sys\n"
        "import tensortap.pytorch, tensortap.keras, tensortap.tensorflow, tensortap.mxnet\n"
        "import tensortap.xgboost, tensortap.jax, tensortap.lightning, tensortap.huggingface\n"
        f"print(sorted(set({frameworks!r}) & set(sys.modules)))\n"
    )
    assert python_prints(code) == "[]"


@pytest.mark.parametrize("framework", [f.name for f in FRAMEWORKS])
def test_each_attachment_is_one_module_of_the_attach_package(framework: str) -> None:
    known = next(f for f in FRAMEWORKS if f.name == framework)
    assert known.module == f"tensortap.attach._{framework}"
    if not known.installed():
        pytest.skip(f"{framework} is not installed here")
    module = importlib.import_module(known.module)
    assert callable(module.enable)
    assert "config" in inspect.signature(module.enable).parameters


def test_report_to_is_offered_without_importing_transformers() -> None:
    pytest.importorskip("transformers")
    code = (
        "import sys\n"
        "import tensortap.huggingface\n"
        "assert 'transformers' not in sys.modules\n"
        "from transformers.integrations import integration_utils\n"
        "print(integration_utils.INTEGRATION_TO_CALLBACK['tensortap'].__name__)\n"
    )
    assert python_prints(code).splitlines()[-1] == "TensortapCallback"
