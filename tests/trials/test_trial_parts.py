"""Trial's helpers talk to it through TrialParts (trials/_parts.py), never through its private
names, and never import trial.py (which imports them): no import circle inside trials/."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parents[2] / "src" / "tensortap"
HELPERS = ("_tensor.py", "_step_block.py", "_read_ahead.py", "_columns.py", "_waiting.py")
PRIVATE = {
    "_index",
    "_reader",
    "_mode",
    "_read",
    "_refresh_if_stale",
    "_raise_missing",
    "_last_step",
    "_step_sets",
    "_names_at",
}


def _is_a_trial(node: ast.expr) -> bool:
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return name == "trial"


def test_no_code_reaches_for_a_private_name_of_trial() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SRC / "trials" / "_trial.py":  # Trial's own file (its _Parts too)
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in PRIVATE and _is_a_trial(node.value):
                found.append(f"{path.relative_to(SRC)}:{node.lineno} trial.{node.attr}")
    assert found == []


def test_the_helpers_of_trial_do_not_import_it() -> None:
    found = []
    for name in HELPERS:
        for node in ast.walk(ast.parse((SRC / "trials" / name).read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "tensortap.trials._trial":
                found.append(f"{name}:{node.lineno}")
    assert found == []


def test_trial_is_what_its_helpers_ask_for(tmp_path: Path) -> None:
    import numpy as np

    from tensortap.testing._fake_trial import TrialBuilder
    from tensortap.trials._parts import TrialParts

    builder = TrialBuilder(tmp_path)
    builder.step({"loss": np.float32(1.0)})
    trial = builder.close()
    parts: TrialParts = trial.parts  # what mypy checks statically, here once at run time
    assert parts.saved_index.version >= 0 and parts.mode_key("train") is not None
    assert parts.last_saved_step(None) == 0 and parts.tensor_names() == ["loss"]
    # the user's trial carries no member that is there for its helpers only
    internal = ("saved_index", "value_reader", "mode_key", "read_raw", "refresh_if_stale")
    assert [
        name for name in (*internal, "last_saved_step", "raise_missing") if hasattr(trial, name)
    ] == []
    assert trial.tensor("loss").trial is trial  # as smdebug's Tensor.trial
