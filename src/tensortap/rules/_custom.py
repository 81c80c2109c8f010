"""Create rules by name: a built-in one, or a Rule subclass defined in a user's Python file.

This is what a job configuration names (smdebug's ``RuleName`` + ``SourceS3Uri`` +
``RuntimeConfigurations``): a class name, optionally a file, and parameters as strings.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from tensortap.exceptions import InvalidConfigError
from tensortap.rules._registry import REGISTRY, find_rule, unknown_rule
from tensortap.rules._rule import Rule
from tensortap.trials._trial import Trial, create_trial


def load_rule_class(source: str | os.PathLike[str], class_name: str) -> type[Rule]:
    """The class ``class_name`` defined in the Python file ``source`` (a Rule subclass)."""
    path = os.path.abspath(os.fspath(source))
    if not os.path.isfile(path):
        raise InvalidConfigError(
            f"custom rule file {source!r} does not exist; give the path of the .py file that "
            f"defines class {class_name}"
        )
    digest = hashlib.sha1(path.encode()).hexdigest()[:12]
    module_name = f"tensortap_custom_rules_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise InvalidConfigError(f"cannot load {path} as a Python module (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(module_name, None)
        raise InvalidConfigError(
            f"importing the custom rule file {path} failed: {type(exc).__name__}: {exc}"
        ) from exc
    found = getattr(module, class_name, None)
    if found is None:
        rules = sorted(
            n for n, v in vars(module).items() if inspect.isclass(v) and issubclass(v, Rule)
        )
        raise InvalidConfigError(
            f"{path} defines no class {class_name!r}; rule classes in it: {rules or 'none'}"
        )
    if not (inspect.isclass(found) and issubclass(found, Rule)):
        raise InvalidConfigError(
            f"{class_name} in {path} is not a subclass of tensortap.rules.Rule "
            "(write 'from tensortap.rules import Rule' and subclass it)"
        )
    return found


def _as_trials(trials: Iterable[Trial | str | os.PathLike[str]] | str | None) -> list[Trial]:
    if trials is None:
        return []
    if isinstance(trials, (str, os.PathLike)):
        trials = [p for p in os.fspath(trials).split(";") if p.strip()]
    return [t if isinstance(t, Trial) else create_trial(t) for t in trials]


def create_rule(
    name: str | type[Rule],
    base_trial: Trial | str | os.PathLike[str],
    other_trials: Iterable[Trial | str | os.PathLike[str]] | str | None = None,
    source: str | os.PathLike[str] | None = None,
    params: Mapping[str, Any] | None = None,
) -> Rule:
    """A rule instance: ``name`` is a built-in rule's name, a Rule class, or the class name of
    a rule defined in the file ``source``; ``params`` may be strings. Other trials may be
    trials, paths, or one string of paths separated by ``;``."""
    if isinstance(name, type):
        cls = name
    elif source is not None:
        cls = load_rule_class(source, name)
    else:
        found = find_rule(name, config_names=False)
        if found is None:
            raise InvalidConfigError(
                f"{unknown_rule(name, REGISTRY)}. For a custom rule give the file that "
                "defines it (source=...)"
            )
        cls = found
    trial = base_trial if isinstance(base_trial, Trial) else create_trial(base_trial)
    others = _as_trials(other_trials)
    kwargs = dict(params or {})
    if others:
        accepts = inspect.signature(cls.__init__).parameters
        if "other_trials" not in accepts:
            raise InvalidConfigError(
                f"rule {cls.__name__} takes no other_trials, but {len(others)} were given"
            )
        kwargs["other_trials"] = others
    return cls(trial, **kwargs)
