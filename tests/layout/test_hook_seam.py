"""No file reaches for a framework hook's private names: the taps and patches beside a hook talk
to it through ``core/_framework_events.py``'s ``FrameworkEvents`` and ``core/_tap_host.py``'s
``TapHost`` (and a framework's extension of it), never through ``hook._x`` (see docs/layout.md,
"Framework adapters: one contract")."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).parents[2] / "src" / "tensortap"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _classes(trees: dict[str, ast.Module]) -> dict[str, list[tuple[str, ast.ClassDef]]]:
    """Every class of the package by its name: (file, definition)."""
    found: dict[str, list[tuple[str, ast.ClassDef]]] = defaultdict(list)
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                found[node.name].append((path, node))
    return found


def _base_names(node: ast.ClassDef) -> list[str]:
    names = []
    for base in node.bases:
        if isinstance(base, ast.Name):
            names.append(base.id)
        elif isinstance(base, ast.Attribute):
            names.append(base.attr)
    return names


def _hook_classes(trees: dict[str, ast.Module]) -> list[tuple[str, ast.ClassDef]]:
    """The framework-free hook, every hook that extends it, and the mixins they are made of."""
    classes = _classes(trees)
    hooks = [(p, c) for p, c in classes["Hook"] if p == "hook/_hook.py"]
    assert hooks, "tensortap/hook/_hook.py defines no class Hook: update this test"
    names = {"Hook", "BaseHook"}
    changed = True
    while changed:  # classes that extend a hook class
        changed = False
        for name, defs in classes.items():
            for path, node in defs:
                if (path, node) in hooks or not names & set(_base_names(node)):
                    continue
                hooks.append((path, node))
                names.add(name)
                changed = True
    for _, node in list(hooks):  # the mixins a hook is made of (defined in the package)
        for base in _base_names(node):
            if base not in names:
                hooks += classes.get(base, [])
    return hooks


def _private_names(node: ast.ClassDef) -> set[str]:
    """The private names a class defines: methods, class attributes, ``self._x = ...``."""
    names = set()
    for item in ast.walk(node):
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and _is_private(item.name):
            names.add(item.name)
        targets: list[ast.expr] = []
        if isinstance(item, ast.Assign):
            targets = item.targets
        elif isinstance(item, ast.AnnAssign):
            targets = [item.target]
        for target in targets:
            if isinstance(target, ast.Name) and _is_private(target.id):
                names.add(target.id)
            elif (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
                and _is_private(target.attr)
            ):
                names.add(target.attr)
    return names


def _own_names(tree: ast.Module) -> set[str]:
    """The private names a file defines for itself (its own classes' and functions')."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            names |= _private_names(node)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _is_private(node.name):
            names.add(node.name)
    return names


def _on_itself(value: ast.expr) -> bool:
    """``self._x``, ``cls._x``, ``super()._x``: an object's own names."""
    if isinstance(value, ast.Name):
        return value.id in ("self", "cls")
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "super"
    )


def reaches(trees: dict[str, ast.Module]) -> list[str]:
    """``file:line: expression`` for each use of a hook's private name outside the files that
    define it: ``hook._x``, ``self.hook._x``, ``getattr(hook, "_x")``."""
    hook_names: set[str] = set()
    for _, hook_class in _hook_classes(trees):
        hook_names |= _private_names(hook_class)
    found = []
    for path, tree in sorted(trees.items()):
        own = _own_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                name, value = node.attr, node.value
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "setattr", "hasattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                name, value = node.args[1].value, node.args[0]
            else:
                continue
            if name in hook_names and name not in own and not _on_itself(value):
                found.append(f"{path}:{node.lineno}: {ast.unparse(value)}.{name}")
    return found


def _package() -> dict[str, ast.Module]:
    return {
        path.relative_to(SRC).as_posix(): ast.parse(path.read_text(encoding="utf-8"))
        for path in SRC.rglob("*.py")
    }


def test_no_file_reaches_for_a_hooks_private_names() -> None:
    offenders = reaches(_package())
    assert offenders == [], (
        "these reach for a framework hook's private names; give the hook a public member on "
        "core/_framework_events.py's FrameworkEvents or core/_tap_host.py's TapHost (or the "
        "framework's extension of it) and use that:\n" + "\n".join(offenders)
    )


def test_the_check_finds_every_spelling() -> None:
    """The check sees a tap's reach in each spelling, and lets a file use its own names."""
    trees = _package()
    trees["keras/_tap.py"] = ast.parse(
        "def tap(hook, self):\n"
        "    hook._recorder\n"
        "    self.hook._contain\n"
        "    getattr(hook, '_lock')\n"
        "    self._recorder\n"
    )
    trees["keras/_own.py"] = ast.parse(
        "class Own:\n    def _contain(self):\n        pass\n\ndef use(other):\n    other._contain\n"
    )
    assert reaches(trees) == [
        "keras/_tap.py:2: hook._recorder",
        "keras/_tap.py:3: self.hook._contain",
        "keras/_tap.py:4: hook._lock",
    ]


def test_the_framework_free_hook_has_every_tap_host_member() -> None:
    """Every hook extends it, so every hook is a TapHost (mypy checks the signatures where a
    hook is handed to its taps; this checks the names without importing a framework)."""
    from tensortap.core._tap_host import TapHost
    from tensortap.hook._hook import Hook

    members = sorted(n for n in vars(TapHost) if not n.startswith("_"))
    assert "save_lazy" in members and "replace" in members
    assert [n for n in members if not hasattr(Hook, n)] == []
