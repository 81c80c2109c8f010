"""Entry points loaded in this process (tensortap/core/_plugins.py): what a distribution
declares but does not deliver is named with the distribution and what failed, and never keeps
the others from loading. (tests/cli/test_plugins.py runs the command line in new processes.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tensortap.exceptions import InvalidConfigError
from tensortap.rules import create_rule, known_rules, unregister_rule
from tensortap.rules._registry import find_rule, snake_case
from tensortap.storage import open_store
from tensortap.storage._resolve import _FACTORIES

GOOD_RULE = """
from tensortap.rules import Rule

class PluginQuiet{tag}(Rule):
    def invoke_at_step(self, step):
        return False

not_a_rule = 42
"""


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A distribution named after the test's tmp directory (entry points load once per
    process, so each test installs its own), on sys.path; its names are forgotten after."""
    tag = "".join(c for c in tmp_path.name if c.isalnum()).capitalize()
    site = tmp_path / "site"
    site.mkdir()
    (site / f"tt_plugin_{tag.lower()}.py").write_text(GOOD_RULE.format(tag=tag))
    (site / f"tt_quiet_store_{tag.lower()}.py").write_text("SOMETHING = 1\n")
    info = site / f"tt_plugin_{tag.lower()}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tt-plugin-{tag}\nVersion: 0.1\n")
    module = f"tt_plugin_{tag.lower()}"
    (info / "entry_points.txt").write_text(
        "[tensortap.rules]\n"
        f"NotARule{tag} = {module}:not_a_rule\n"
        f"Gone{tag} = {module}_gone:Gone\n"
        f"PluginQuiet{tag} = {module}:PluginQuiet{tag}\n"
        "\n[tensortap.stores]\n"
        f"quiet{tag.lower()} = tt_quiet_store_{tag.lower()}\n"
        f"number{tag.lower()} = tt_quiet_store_{tag.lower()}:SOMETHING\n"
    )
    monkeypatch.syspath_prepend(str(site))
    yield tag
    unregister_rule(f"PluginQuiet{tag}")
    for scheme in (f"quiet{tag.lower()}", f"number{tag.lower()}"):
        _FACTORIES.pop(scheme, None)


def test_a_broken_rule_entry_point_is_named_and_hides_no_other(installed: str) -> None:
    tag = installed
    found = find_rule(snake_case(f"PluginQuiet{tag}"))  # by its configuration name
    assert found is not None and found.__name__ == f"PluginQuiet{tag}"
    assert known_rules()[f"PluginQuiet{tag}"] is found
    assert find_rule(f"Gone{tag}") is None  # its module is not there
    with pytest.raises(InvalidConfigError) as caught:
        create_rule(f"Gone{tag}", "unread")
    said = str(caught.value)
    distribution = f"tt-plugin-{tag} 0.1"
    assert f"the entry point Gone{tag} = " in said and f"of the distribution {distribution}" in said
    assert "ModuleNotFoundError" in said and f"fix or uninstall {distribution}" in said
    assert f"NotARule{tag}" in said and "names a Rule subclass or a module" in said


def test_a_store_entry_point_that_registers_nothing_is_said(installed: str) -> None:
    scheme = installed.lower()
    with pytest.raises(InvalidConfigError) as caught:
        open_store(f"quiet{scheme}://x")
    said = str(caught.value)
    assert f"no storage backend for quiet{scheme}://" in said
    assert f"loaded but did not register quiet{scheme}://" in said
    assert f"tt-plugin-{installed} 0.1" in said
    with pytest.raises(InvalidConfigError, match="a factory taking the location; got 1"):
        open_store(f"number{scheme}://x")
