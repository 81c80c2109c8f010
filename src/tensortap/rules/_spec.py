"""A rule to run, by name: what a job, ``tensortap.scale`` and the command line hand around.

A :class:`RuleSpec` names a registered rule (a built-in one, or one registered with
:func:`tensortap.rules.register_rule`) or a Rule class in a user's Python file, with its
parameters as strings, the collections it reads and the other trials it compares with. It is
checked when built (the class exists and takes these parameters, checked without a trial) and
builds the rule over a trial with :meth:`RuleSpec.create`. A job's rule
(:class:`tensortap.jobs.Rule`) is a RuleSpec with actions.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tensortap.core._hook_settings import CollectionSettings
from tensortap.exceptions import InvalidConfigError
from tensortap.rules._custom import create_rule, load_rule_class
from tensortap.rules._registry import (
    REGISTRY,
    find_rule,
    is_builtin_module,
    load_rule_plugins,
    unknown_rule,
)
from tensortap.rules._rule import Rule
from tensortap.rules.rule_configs import BuiltinRuleConfig, config_for
from tensortap.trials._trial import Trial

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def string_parameters(params: Mapping[str, Any] | None, what: str) -> dict[str, str]:
    """``params`` with every value as a string (strings are kept as they are)."""
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise InvalidConfigError(f"{what} must be a dict of name to value, got {params!r}")
    return {str(k): v if isinstance(v, str) else str(v) for k, v in params.items()}


@dataclass(frozen=True)
class RuleSpec:
    """A rule to run. Build it with :meth:`builtin` or :meth:`custom`; ``name`` is its
    configuration name in statuses and logs, ``class_name`` the rule class, ``source`` the .py
    file of a custom rule, ``module`` the module that registers a rule defined outside
    :mod:`tensortap.rules.builtin` (imported where the rule runs)."""

    name: str
    class_name: str
    parameters: Mapping[str, str] = field(default_factory=dict)
    source: str | None = None  # a .py file for custom rules
    collections: tuple[CollectionSettings, ...] = ()
    other_trials: tuple[str, ...] = ()
    module: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise InvalidConfigError(
                f"a rule name must be 1-64 letters, digits, '_', '.' or '-' (it names the "
                f"rule's log file), got {self.name!r}"
            )
        object.__setattr__(
            self, "parameters", string_parameters(self.parameters, "rule_parameters")
        )
        object.__setattr__(self, "other_trials", tuple(self.other_trials))
        self.rule_class()  # the class exists and takes these parameters

    @property
    def is_builtin(self) -> bool:
        return self.source is None

    def create(self, trial: Trial) -> Rule:
        """The rule object on ``trial`` (and this spec's other trials), named as the spec."""
        rule = create_rule(
            self.class_name if self.source is not None else self._registered(),
            trial,
            list(self.other_trials) or None,
            source=self.source,
            params=dict(self.parameters),
        )
        rule.rule_name = self.name
        return rule

    def rule_class(self) -> type[Rule]:
        """The rule's class (loading a custom rule's file), its parameters checked."""
        if self.source is None:
            cls = self._registered()
            config_for(self.class_name, **self.parameters)
            return cls
        cls = load_rule_class(self.source, self.class_name)
        specs = {s.name: s for s in cls.parameters()}
        for pname, value in self.parameters.items():
            if pname not in specs:
                raise InvalidConfigError(
                    f"rule {self.class_name} ({self.source}) has no parameter {pname!r} (given "
                    f"{value!r}); its parameters are: {', '.join(specs) or 'none'}"
                )
        missing = [s.name for s in specs.values() if s.required and s.name not in self.parameters]
        if missing:
            raise InvalidConfigError(
                f"rule {self.class_name} ({self.source}) needs rule_parameters {missing}"
            )
        cls.check_parameters(**self.parameters)  # read and checked, without a trial
        return cls

    def _registered(self) -> type[Rule]:
        """The registered class of a rule that is not custom (importing the module that
        registers it, in a process that has not)."""
        if self.class_name not in REGISTRY and self.module is not None:
            try:
                importlib.import_module(self.module)
            except Exception as exc:
                raise InvalidConfigError(
                    f"rule {self.class_name} is registered by the module {self.module}, which "
                    f"cannot be imported here ({type(exc).__name__}: {exc}); make it importable "
                    "where the rules run (PYTHONPATH, an installed package)"
                ) from exc
        if self.class_name not in REGISTRY and self.module is not None:
            load_rule_plugins()  # an installed rule's class, registered by its entry point
        cls = find_rule(self.class_name, config_names=False)
        if cls is None and self.module is not None:
            raise InvalidConfigError(
                f"rule {self.class_name} is registered by the module {self.module}, which does "
                "not register it in this process (a rule registered in a script or notebook, "
                "__main__, is not known to the processes that run a job's rules); define it in "
                "an importable module"
            )
        if cls is None:
            raise InvalidConfigError(unknown_rule(self.class_name, REGISTRY))
        return cls

    @classmethod
    def builtin(
        cls,
        base_config: BuiltinRuleConfig | str,
        rule_parameters: Mapping[str, Any] | None = None,
        name: str | None = None,
        collections: Sequence[CollectionSettings] = (),
        other_trials: Sequence[str | os.PathLike[str]] = (),
    ) -> RuleSpec:
        """A registered rule from ``rule_configs.<rule>()`` (or its class name), parameters
        overriding the config's; ``collections`` are saved with those it declares."""
        if isinstance(base_config, str):
            base_config = config_for(base_config)
        if not isinstance(base_config, BuiltinRuleConfig):
            raise InvalidConfigError(
                f"Rule.builtin takes rule_configs.<rule>() or a built-in rule name, got "
                f"{base_config!r}; built-in rules: {', '.join(sorted(REGISTRY))}"
            )
        params = {
            **base_config.parameters,
            **string_parameters(rule_parameters, "rule_parameters"),
        }
        config = config_for(base_config.name, **params)  # unknown or bad parameters fail here
        module = config.rule_class.__module__
        return cls(
            name or config.name,
            config.name,
            config.parameters,
            None,
            config.collections + tuple(collections),
            tuple(os.fspath(t) for t in other_trials),
            None if is_builtin_module(module) else module,
        )

    @classmethod
    def custom(
        cls,
        name: str,
        source: str | os.PathLike[str],
        rule_to_invoke: str | None = None,
        rule_parameters: Mapping[str, Any] | None = None,
        collections: Sequence[CollectionSettings] = (),
        other_trials: Sequence[str | os.PathLike[str]] = (),
    ) -> RuleSpec:
        """A rule class (``rule_to_invoke``, by default ``name``) from the Python file
        ``source``; ``rule_parameters`` are strings parsed by the class's annotations. The
        collections the class declares (``collections_needed``) are saved, with
        ``collections``."""
        params = string_parameters(rule_parameters, "rule_parameters")
        rule_cls = load_rule_class(source, rule_to_invoke or name)
        declared = tuple(
            CollectionSettings(c, rule_cls.collection_parameters.get(c, {}))
            for c in rule_cls.required_collections(**params)
        )
        trials = [os.fspath(t) for t in other_trials]
        more = params.pop("other_trials", None) or params.pop("other-trials-paths", None)
        if more:
            trials += [p for p in more.split(";") if p]
        return cls(
            name,
            rule_to_invoke or name,
            params,
            os.path.abspath(os.fspath(source)),
            declared + tuple(collections),
            tuple(trials),
        )

    # -- the record --
    def to_dict(self) -> dict[str, Any]:
        data = {
            "name": self.name,
            "class_name": self.class_name,
            "parameters": dict(self.parameters),
            "source": self.source,
            "collections": [c.to_dict() for c in self.collections],
            "other_trials": list(self.other_trials),
        }
        if self.module is not None:
            data["module"] = self.module
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RuleSpec:
        return cls(**rule_spec_fields(data))


def rule_spec_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """The RuleSpec fields of a record (:meth:`RuleSpec.to_dict`)."""
    return {
        "name": data["name"],
        "class_name": data["class_name"],
        "parameters": data.get("parameters") or {},
        "source": data.get("source"),
        "collections": tuple(
            CollectionSettings(c["name"], c.get("parameters") or {})
            for c in data.get("collections") or ()
        ),
        "other_trials": tuple(data.get("other_trials") or ()),
        "module": data.get("module"),
    }


__all__ = ["RuleSpec", "rule_spec_fields", "string_parameters"]
