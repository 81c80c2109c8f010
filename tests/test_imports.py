"""Imports point one way: nothing in core/format/storage/trials/writer imports a framework."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "tensortap"
FRAMEWORKS = {
    "torch",
    "tensorflow",
    "keras",
    "xgboost",
    "mxnet",
    "jax",
    "boto3",
    "matplotlib",
    "tensorboard",
    "plotly",
}
# package -> packages of tensortap it must not import
FORBIDDEN = {
    "core": {"format", "storage", "trials", "writer", "hook", "frameworks", "rules", "jobs"},
    "format": {"storage", "trials", "writer", "hook", "frameworks", "rules", "jobs"},
    "storage": {"trials", "writer", "hook", "frameworks", "rules", "jobs"},
    "trials": {"writer", "hook", "frameworks", "rules", "jobs"},
    "writer": {"trials", "hook", "frameworks", "rules", "jobs"},
}


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_import_direction() -> None:
    problems = []
    for package, forbidden in FORBIDDEN.items():
        for path in (SRC / package).rglob("*.py"):
            for module in imported_modules(path):
                top = module.split(".")[0]
                if top in FRAMEWORKS:
                    problems.append(f"{path.relative_to(SRC)} imports {module}")
                parts = module.split(".")
                if top == "tensortap" and len(parts) > 1 and parts[1] in forbidden:
                    problems.append(f"{path.relative_to(SRC)} imports {module}")
    assert problems == []


def test_checker_would_catch_a_violation(tmp_path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nfrom tensortap.trials import Trial\n")
    assert imported_modules(bad) == {"torch", "tensortap.trials"}


def test_zero_code_change_attaches_without_importing_unused_frameworks() -> None:
    """Every attached script imports the zcc modules: they must not import Keras (seconds)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import tensortap.keras.zcc, tensortap.xgboost.zcc\n"
        "loaded = sorted({'keras', 'tensorflow', 'xgboost'} & set(sys.modules))\n"
        "import tensortap.keras as tt\n"
        "assert tt.Hook is tt.KerasHook and 'keras' in sys.modules\n"
        "print(loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
