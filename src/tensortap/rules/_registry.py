"""The rules registry: every rule a configuration can name, by class name.

A rule registers itself where it is defined: a :class:`~tensortap.rules.Rule` subclass in a
public module of :mod:`tensortap.rules.builtin` registers when its class statement runs (that
package imports all its public modules), and a rule defined anywhere else registers with
:func:`register_rule`::

    @register_rule
    class MyRule(Rule):
        collections_needed = ("gradients",)

        def __init__(self, base_trial, threshold: float = 1.0) -> None: ...

A rule installed as a distribution declares an entry point of the group ``tensortap.rules``
(``LossAbove = "my_rules:LossAbove"``, a Rule subclass, or a module that registers its rules):
on a rule name nobody registered, the group's entry points are loaded (:func:`find_rule`), so
the command line, a job's rule processes and the dashboard know it in a new process.

What the class declares is what the rest derives: its name (the key here), its parameters
(``__init__``'s annotations), the collections it needs, and its configuration name
(``config_name``, by default the class name in snake case: ``rule_configs.my_rule()``).
Two tables: :data:`REGISTRY`, every rule known (built-in, registered, loaded from entry
points), read by the names :mod:`tensortap.rules` exports, the :mod:`rule_configs` helpers and
the command line's ``--rule``; and :data:`BUILTIN`, tensortap's own rules only
(``BUILTIN_RULES``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

from tensortap.core._plugins import RULES_GROUP, LoadedPlugin, failures, load_plugins
from tensortap.exceptions import InvalidConfigError

if TYPE_CHECKING:
    from tensortap.rules._rule import Rule

#: The package whose public modules hold the built-in rules (registered by being defined there).
BUILTIN_PACKAGE = "tensortap.rules.builtin"

#: Every rule known by class name, in the order they registered: the built-in rules, those
#: registered with :func:`register_rule`, and those loaded from entry points. Shared, live.
REGISTRY: dict[str, type[Rule]] = {}

#: tensortap's own rules (defined in :data:`BUILTIN_PACKAGE`) by class name: what
#: ``tensortap.rules.builtin.BUILTIN_RULES`` is. Shared, live.
BUILTIN: dict[str, type[Rule]] = {}

R = TypeVar("R", bound="type[Rule]")

_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def snake_case(class_name: str) -> str:
    """``VanishingGradient`` -> ``vanishing_gradient``; a run of capitals is one word
    (``NLPSequenceRatio`` -> ``nlp_sequence_ratio``)."""
    return _WORD.sub("_", class_name).lower()


def config_name(cls: type[Rule]) -> str:
    """The name of the ``rule_configs`` helper of ``cls``: its declared ``config_name``, or its
    class name in snake case."""
    declared = cls.__dict__.get("config_name")
    return declared if isinstance(declared, str) else snake_case(cls.__name__)


def is_builtin_module(module: str) -> bool:
    """True for a public module of the built-in rules' package (``_common`` is a helper)."""
    package, _, leaf = module.rpartition(".")
    return package == BUILTIN_PACKAGE and not leaf.startswith("_")


def register_rule(cls: R) -> R:
    """Register the rule class ``cls`` (a decorator): configurations, ``rule_configs`` and jobs
    can then name it like a built-in rule. Defining the class again (a re-run cell, a reloaded
    module) replaces it; another class of the same name, or of the same configuration name,
    is refused."""
    from tensortap.rules._rule import Rule

    if not (isinstance(cls, type) and issubclass(cls, Rule)) or cls is Rule:
        raise InvalidConfigError(
            f"register_rule takes a subclass of tensortap.rules.Rule, got {cls!r}; subclass "
            "Rule and implement invoke_at_step"
        )
    name, helper = cls.__name__, config_name(cls)
    known = REGISTRY.get(name)
    if known is not None and _where(known) != _where(cls):
        raise InvalidConfigError(
            f"a rule named {name} is already registered (from {known.__module__}); give "
            f"{cls.__module__}.{cls.__qualname__} another class name"
        )
    for other in REGISTRY.values():
        if other.__name__ != name and config_name(other) == helper:
            raise InvalidConfigError(
                f"rule {name}'s configuration name {helper!r} is already that of rule "
                f"{other.__name__}; declare another one on the class (config_name = '...')"
            )
    REGISTRY[name] = cls
    if is_builtin_module(cls.__module__):
        BUILTIN[name] = cls
    return cls


def unregister_rule(name: str) -> None:
    """Remove the rule registered as ``name`` (tests, notebooks); unknown names are ignored."""
    REGISTRY.pop(name, None)
    BUILTIN.pop(name, None)


def _register_plugin(plugin: LoadedPlugin) -> None:
    """An entry point's object: a module registers its rules when imported (``@register_rule``);
    a Rule subclass is registered here (unless it registered itself)."""
    from tensortap.rules._rule import Rule

    found = plugin.loaded
    if isinstance(found, ModuleType):
        return
    if not (isinstance(found, type) and issubclass(found, Rule)):
        raise InvalidConfigError(
            f"a tensortap.rules entry point names a Rule subclass or a module that registers "
            f"rules; got {found!r}"
        )
    if REGISTRY.get(found.__name__) is not found:
        register_rule(found)


def load_rule_plugins() -> None:
    """Load the rules installed with ``tensortap.rules`` entry points (each once per process);
    one that fails is logged and said by :func:`unknown_rule`, never hiding the others."""
    load_plugins(RULES_GROUP, accept=_register_plugin)


def find_rule(name: str, config_names: bool = True) -> type[Rule] | None:
    """The rule known as class name ``name`` (or, with ``config_names``, configuration name
    ``vanishing_gradient``), loading the installed rules on a name nobody registered; None
    when no rule has that name."""
    for attempt in range(2):
        cls = REGISTRY.get(name)
        if cls is None and config_names:
            cls = by_config_name(name)
        if cls is not None or attempt:
            return cls
        load_rule_plugins()
    return None


def known_rules() -> dict[str, type[Rule]]:
    """Every rule known, by class name: built-in, registered, and installed (entry points,
    loaded now)."""
    load_rule_plugins()
    return dict(REGISTRY)


def registered(name: str) -> type[Rule] | None:
    """The rule registered as class name ``name``, or None."""
    return REGISTRY.get(name)


def by_config_name(helper: str) -> type[Rule] | None:
    """The rule whose configuration name is ``helper`` (``vanishing_gradient``), or None."""
    for cls in REGISTRY.values():
        if config_name(cls) == helper:
            return cls
    return None


def _spelling(name: str) -> str:
    """A rule's name with case and underscores left out: ``VanishingGradient`` and
    ``vanishing_gradient`` are one spelling."""
    return name.replace("_", "").replace("-", "").lower()


def unknown_rule(name: str, names: Iterable[str]) -> str:
    """What to say of a rule ``name`` that is none of ``names``: the closest of them (a typo,
    or the class name where a configuration name was expected), then all of them."""
    listed = sorted(names)
    by_spelling = {_spelling(n): n for n in listed}
    close = difflib.get_close_matches(_spelling(name), list(by_spelling), n=1, cutoff=0.75)
    hint = f"did you mean {by_spelling[close[0]]!r}? " if close else ""
    said = f"no built-in rule {name!r}; {hint}built-in rules are {', '.join(listed)}"
    broken = failures(RULES_GROUP)
    if broken:  # an installed rule that failed to load may be the one meant
        said += ". Installed rules that failed to load: " + "; ".join(f.describe() for f in broken)
    return said


def _where(cls: type) -> tuple[str, str]:
    return cls.__module__, cls.__qualname__


__all__ = [
    "BUILTIN",
    "BUILTIN_PACKAGE",
    "REGISTRY",
    "by_config_name",
    "config_name",
    "find_rule",
    "is_builtin_module",
    "known_rules",
    "load_rule_plugins",
    "register_rule",
    "registered",
    "snake_case",
    "unregister_rule",
]
