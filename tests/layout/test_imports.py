"""Imports point one way (core <- format <- storage <- trials <- rules <- jobs <- the outside;
the writer beside trials; adapters on top), and nothing in core/format/storage/trials/writer/
rules imports a framework, boto3 or a plotting library at module level (S3 imports boto3 only
when an ``s3://`` location is opened)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).parents[2] / "src" / "tensortap"
FRAMEWORKS = {
    "torch",
    "tensorflow",
    "keras",
    "xgboost",
    "mxnet",
    "jax",
    "boto3",
    "botocore",
    "matplotlib",
    "tensorboard",
    "plotly",
}
# the framework adapters and the hook they share
ADAPTERS = {
    "pytorch",
    "keras",
    "tensorflow",
    "xgboost",
    "mxnet",
    "jax",
    "lightning",
    "huggingface",
    "hook",
    "attach",
}
# what sits on top of the trials: running jobs and showing them
OUTSIDE = {
    "jobs",
    "serve",
    "cli",
    "viz",
    "report",
    "table",
    "scale",
    "diagnosis",
    "tensorboard",
    "trackers",
}
# package -> packages of tensortap it must not import
FORBIDDEN = {
    "core": {"format", "storage", "trials", "writer", "rules", "smdebug"} | ADAPTERS | OUTSIDE,
    "format": {"storage", "trials", "writer", "rules", "smdebug"} | ADAPTERS | OUTSIDE,
    "storage": {"trials", "writer", "rules", "smdebug"} | ADAPTERS | OUTSIDE,
    "trials": {"writer", "rules"} | ADAPTERS | OUTSIDE,
    "writer": {"trials", "rules", "smdebug"} | ADAPTERS | OUTSIDE,
    "rules": ADAPTERS | OUTSIDE,
}


def imported_modules(path: Path, module_level: bool = False) -> set[str]:
    """Every module ``path`` imports; with ``module_level``, only those imported when the
    module itself is (not inside a function, which runs later, if ever)."""
    found: set[str] = set()
    pending: list[ast.AST] = [ast.parse(path.read_text())]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        if module_level and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        pending.extend(ast.iter_child_nodes(node))
    return found


def package_names() -> set[str]:
    """The packages and top-level modules of tensortap."""
    return {p.stem for p in SRC.glob("*.py")} | {
        p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()
    }


def test_the_rules_name_real_packages() -> None:
    """A rule about a package that does not exist checks nothing."""
    named = set(FORBIDDEN) | set().union(*FORBIDDEN.values())
    assert named - package_names() == set()


def test_import_direction() -> None:
    problems = []
    for package, forbidden in FORBIDDEN.items():
        for path in (SRC / package).rglob("*.py"):
            for module in imported_modules(path, module_level=True):
                if module.split(".")[0] in FRAMEWORKS:
                    problems.append(f"{path.relative_to(SRC)} imports {module} at module level")
            for module in imported_modules(path):
                parts = module.split(".")
                if parts[0] == "tensortap" and len(parts) > 1 and parts[1] in forbidden:
                    problems.append(f"{path.relative_to(SRC)} imports {module}")
    assert problems == []


def test_importing_the_inner_packages_loads_no_framework() -> None:
    """What the AST check claims, checked by importing every module of the inner packages."""
    modules = sorted(
        "tensortap."
        + ".".join(path.relative_to(SRC).with_suffix("").parts).replace(".__init__", "")
        for package in FORBIDDEN
        for path in (SRC / package).rglob("*.py")
    )
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(sorted({FRAMEWORKS!r} & {{m.split('.')[0] for m in sys.modules}}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_checker_would_catch_a_violation(tmp_path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nfrom tensortap.trials import Trial\n")
    assert imported_modules(bad) == {"torch", "tensortap.trials"}
    lazy = tmp_path / "lazy.py"
    lazy.write_text("import numpy\ndef client():\n    import boto3\n")
    assert imported_modules(lazy) == {"numpy", "boto3"}
    assert imported_modules(lazy, module_level=True) == {"numpy"}


def test_zero_code_change_attaches_without_importing_unused_frameworks() -> None:
    """Every attached script imports the zcc modules: they must not import Keras (seconds)."""
    code = (
        "import sys\n"
        "import tensortap.attach._keras, tensortap.attach._xgboost\n"
        "loaded = sorted({'keras', 'tensorflow', 'xgboost'} & set(sys.modules))\n"
        "import tensortap.keras as tt\n"
        "assert tt.Hook is tt.KerasHook and 'keras' in sys.modules\n"
        "print(loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_an_attached_script_pays_for_the_frameworks_it_imports_only(tmp_path) -> None:
    """``tensortap run`` enables every installed framework's attachment before the script runs:
    none imports its framework (PyTorch took seconds and hundreds of MB from every JAX, Keras
    and XGBoost script); each attaches when the script imports it (tests/pytorch/test_attach.py
    checks that a model is still found)."""
    config = tmp_path / "hook.json"
    config.write_text(json.dumps({"out_dir": str(tmp_path / "t")}))
    script = tmp_path / "train.py"
    script.write_text(
        f"import sys\nprint(sorted({FRAMEWORKS!r} & {{m.split('.')[0] for m in sys.modules}}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "tensortap.attach", "--config", str(config), str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
