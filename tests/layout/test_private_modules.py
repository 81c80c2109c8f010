"""Implementation modules are private by name and each package's ``__init__`` is its API; old
module paths still import (the same module object, with a DeprecationWarning naming the
package to import from), and job records that name an old module still load."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from tensortap._moved_table import MOVED

SRC = Path(__file__).parents[2] / "src" / "tensortap"
# modules whose names are API (smdebug's and SageMaker's names, and one module per built-in rule)
PUBLIC = {"exceptions", "modes", "rules/rule_configs"}


def test_every_implementation_module_is_private_by_name() -> None:
    public = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).with_suffix("").as_posix()
        if path.name in ("__init__.py", "__main__.py") or rel in PUBLIC:
            continue
        if path.parent.name == "builtin" or "__pycache__" in path.parts:
            continue  # rules/builtin: a module per rule, `_x` its helpers
        if not any(part.startswith("_") for part in path.relative_to(SRC).parts):
            public.append(rel)
    assert public == []


@pytest.mark.parametrize(
    "old", ["tensortap.trials.trial", "tensortap.pytorch.hook", "tensortap.core.save_config"]
)
def test_an_old_module_path_is_the_new_module_with_a_warning(old: str) -> None:
    sys.modules.pop(old, None)
    new = importlib.import_module(MOVED[old])
    with pytest.warns(DeprecationWarning, match=f"{old} is an old path of {MOVED[old]}"):
        module = importlib.import_module(old)
    assert module is new


def test_an_old_path_does_not_shadow_a_function_of_the_same_name() -> None:
    """``tensortap.jax.record`` is a function (its module is ``tensortap.jax._record``)."""
    import tensortap.jax

    assert "tensortap.jax.record" not in MOVED
    assert callable(tensortap.jax.record) and not isinstance(tensortap.jax.record, type(sys))


def test_every_old_path_names_a_module_that_exists() -> None:
    missing = [new for new in MOVED.values() if importlib.util.find_spec(new) is None]
    assert missing == []


def test_old_paths_import_in_a_fresh_process_without_error() -> None:
    code = (
        "import warnings; warnings.simplefilter('error')\n"
        "import tensortap\n"
        "try:\n    import tensortap.trials.series\nexcept DeprecationWarning as e:\n"
        "    print('warned', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "warned tensortap.trials.series is an old path" in out.stdout


def test_importing_an_old_path_leaves_the_modules_spec_and_reload_works() -> None:
    """The alias once rewrote the module's ``__spec__`` to the old name, so that
    ``importlib.reload`` found the alias again and silently ran nothing (issue 45)."""
    code = (
        "import importlib, warnings\n"
        "warnings.simplefilter('ignore', DeprecationWarning)\n"
        "import tensortap.core._save_config as new\n"
        "import tensortap.core.save_config as old\n"
        "assert old is new\n"
        "print('spec', new.__spec__.name)\n"
        "before = new.SaveConfig\n"
        "again = importlib.reload(old)\n"
        "print('reloaded', again is new and new.SaveConfig is not before)\n"
        "import tensortap.core.save_config as old_again\n"
        "print('same', old_again is new)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:3] == [
        "spec tensortap.core._save_config",
        "reloaded True",
        "same True",
    ]
