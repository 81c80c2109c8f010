"""Implementation modules are private by name and each package's ``__init__`` is its API. The
few old paths the documentation once showed are stub modules that warn with the import to use
and the release they go away in; there is no import-system finder, so any other old path is
gone and ``importlib.reload`` of a tensortap module reloads it."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tensortap.core._old_paths import REMOVED_IN

SRC = Path(__file__).parents[2] / "src" / "tensortap"
# modules whose names are API (smdebug's and SageMaker's names, and one module per built-in rule)
PUBLIC = {"exceptions", "modes", "rules/rule_configs"}
#: The old paths kept (each once documented in docs/ or the README) and what they re-export.
STUBS = {
    "tensortap.s3": ["S3Store"],
    "tensortap.storage.s3": ["S3Store"],
    "tensortap.testing.store_conformance": ["CHECKS", "check_store"],
}


def test_every_implementation_module_is_private_by_name() -> None:
    public = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).with_suffix("").as_posix()
        if path.name in ("__init__.py", "__main__.py") or rel in PUBLIC:
            continue
        if path.parent.name == "builtin" or "__pycache__" in path.parts:
            continue  # rules/builtin: a module per rule, `_x` its helpers
        if "tensortap." + rel.replace("/", ".") in STUBS:
            continue
        if not any(part.startswith("_") for part in path.relative_to(SRC).parts):
            public.append(rel)
    assert public == []


@pytest.mark.parametrize("old", sorted(STUBS))
def test_an_old_path_warns_with_an_import_that_works_and_its_release(old: str) -> None:
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        __import__(old)  # as an import statement does
    module = sys.modules[old]
    (warning,) = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    said = str(warning.message)
    assert said.startswith(f"{old} is an old path of tensortap, removed in tensortap {REMOVED_IN}")
    assert warning.filename == __file__  # it points at the import that named the old path
    advice = said.split(": use ", 1)[1]
    for statement in advice.split("; "):  # each advised import works, and gives the same names
        names: dict[str, object] = {}
        exec(statement, names)  # our own message, built from our own table
        for name in statement.split(" import ", 1)[1].split(", "):
            assert names[name] is getattr(module, name), (old, name)
    assert sorted(module.__all__) == sorted(STUBS[old])
    assert sorted(
        n for s in advice.split("; ") for n in s.split(" import ")[1].split(", ")
    ) == sorted(STUBS[old])


def test_an_old_path_never_documented_is_gone_and_no_finder_is_installed() -> None:
    code = (
        "import sys, tensortap, tensortap.rules, tensortap.storage\n"
        "print('finders', [type(f).__module__ for f in sys.meta_path"
        " if type(f).__module__.startswith('tensortap')])\n"
        "try:\n    import tensortap.trials.trial\nexcept ModuleNotFoundError as e:\n"
        "    print('gone', e.name)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["finders []", "gone tensortap.trials.trial"]


def test_an_old_path_does_not_shadow_a_function_of_the_same_name() -> None:
    """``tensortap.jax.record`` is a function (its module is ``tensortap.jax._record``)."""
    import tensortap.jax

    assert callable(tensortap.jax.record) and not isinstance(tensortap.jax.record, type(sys))


def test_reload_of_a_tensortap_module_reloads_it_after_an_old_path_was_imported() -> None:
    """The finder once rewrote the module's ``__spec__`` to the old name, so that
    ``importlib.reload`` found the alias again and silently ran nothing (issue 45, 49)."""
    code = (
        "import importlib, warnings\n"
        "warnings.simplefilter('ignore', DeprecationWarning)\n"
        "import tensortap.storage._s3 as new\n"
        "import tensortap.s3 as old\n"
        "print('spec', new.__spec__.name, old.__spec__.name)\n"
        "before = new.S3Store\n"
        "again = importlib.reload(new)\n"
        "print('reloaded', again is new and new.S3Store is not before)\n"
        "stub = importlib.reload(old)\n"
        "print('stub', stub is old and old.__spec__.name)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:3] == [
        "spec tensortap.storage._s3 tensortap.s3",
        "reloaded True",
        "stub tensortap.s3",
    ]
