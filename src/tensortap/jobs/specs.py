"""What a training job is configured with: the hook's collections, TensorBoard output, rules.

Names follow the SageMaker SDK of the seeds (``DebuggerHookConfig``, ``CollectionConfig``,
``TensorBoardOutputConfig``, ``Rule.builtin``/``Rule.sagemaker``, ``Rule.custom``) so notebooks
translate by changing the import. Every object is frozen and validated when built: a bad rule
name, parameter or collection setting fails here, before any training starts.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tensortap.core.collections import (
    BUILTIN_COLLECTIONS,
    INITIAL_WEIGHTS,
    TRAINING_LOOP,
    check_included,
)
from tensortap.exceptions import InvalidConfigError
from tensortap.hook import DEFAULT_INCLUDE_COLLECTIONS
from tensortap.hook_config import CollectionSettings, HookConfig
from tensortap.jobs.actions import Action, StopTraining, action_from_dict
from tensortap.rules.builtin import BUILTIN_RULES
from tensortap.rules.custom import create_rule, load_rule_class
from tensortap.rules.params import coerce
from tensortap.rules.rule import Rule as RuleObject
from tensortap.rules.rule_configs import BuiltinRuleConfig, config_for
from tensortap.trials.trial import Trial

#: The hook's save interval in a job whose user set none: rules need more than every 500th step.
JOB_SAVE_INTERVAL = "10"
#: ... and of EVAL steps: every one, so that rules compare whole evaluation passes (different
#: validation batches are not comparable one by one).
JOB_EVAL_SAVE_INTERVAL = "1"

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def _strings(params: Mapping[str, Any] | None, what: str) -> dict[str, str]:
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise InvalidConfigError(f"{what} must be a dict of name to value, got {params!r}")
    return {str(k): v if isinstance(v, str) else str(v) for k, v in params.items()}


@dataclass(frozen=True)
class CollectionConfig:
    """A collection the hook saves, with string parameters (``include_regex``,
    ``save_interval``, ``save_steps``, ``reductions``, ... as in :mod:`tensortap.hook_config`)."""

    name: str
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters", _strings(self.parameters, "parameters"))
        self.settings()  # validate now

    def settings(self) -> CollectionSettings:
        return CollectionSettings(self.name, self.parameters)


@dataclass(frozen=True)
class DebuggerHookConfig:
    """The hook of the training job: hook-wide parameters and per-collection settings.

    The trial is written inside the job's directory, or, with ``s3_output_path`` (an
    ``s3://bucket/prefix`` URL or a directory), at ``{s3_output_path}/{job_name}/debug-output``
    as SageMaker lays it out (see ``TrainingJob.debugger_artifacts_path``)."""

    hook_parameters: Mapping[str, Any] = field(default_factory=dict)
    collection_configs: Sequence[CollectionConfig] = ()
    s3_output_path: str | None = None

    def __post_init__(self) -> None:
        path = self.s3_output_path
        if path is not None and (not isinstance(path, str) or not path.strip("/")):
            raise InvalidConfigError(
                "s3_output_path must be a location such as 's3://bucket/prefix' (or a "
                f"directory), got {path!r}"
            )
        object.__setattr__(
            self, "hook_parameters", _strings(self.hook_parameters, "hook_parameters")
        )
        configs = tuple(self.collection_configs or ())
        for c in configs:
            if not isinstance(c, CollectionConfig):
                raise InvalidConfigError(
                    f"collection_configs must hold CollectionConfig objects, got {c!r}"
                )
        object.__setattr__(self, "collection_configs", configs)
        HookConfig("validate", self.hook_parameters, tuple(c.settings() for c in configs))

    def trial_location(self, job_name: str, default: str) -> str:
        """Where a job of this name writes its trial (``default`` without s3_output_path)."""
        if self.s3_output_path is None:
            return default
        return f"{self.s3_output_path.rstrip('/')}/{job_name}/debug-output"


@dataclass(frozen=True)
class TensorBoardOutputConfig:
    """Where TensorBoard event files go (default: ``tensorboard/`` in the job directory)."""

    local_path: str | None = None


@dataclass(frozen=True)
class Rule:
    """A rule of a job. Build it with :meth:`builtin` (alias :meth:`sagemaker`) or
    :meth:`custom`; ``name`` is its configuration name in statuses and logs."""

    name: str
    class_name: str
    parameters: Mapping[str, str] = field(default_factory=dict)
    source: str | None = None  # a .py file for custom rules
    collections: tuple[CollectionSettings, ...] = ()
    actions: tuple[Action, ...] = ()
    other_trials: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise InvalidConfigError(
                f"a rule name must be 1-64 letters, digits, '_', '.' or '-' (it names the "
                f"rule's log file), got {self.name!r}"
            )
        object.__setattr__(self, "parameters", _strings(self.parameters, "rule_parameters"))
        object.__setattr__(self, "actions", tuple(self.actions))
        for action in self.actions:
            if not isinstance(action, Action):
                raise InvalidConfigError(
                    f"actions must be tensortap.jobs actions (StopTraining, Webhook, Email, "
                    f"Command), got {action!r}"
                )
        object.__setattr__(self, "other_trials", tuple(self.other_trials))
        self.rule_class()  # the class exists and takes these parameters

    @property
    def is_builtin(self) -> bool:
        return self.source is None

    def create(self, trial: Trial) -> RuleObject:
        """The rule object on ``trial`` (and this spec's other trials), named as the spec."""
        rule = create_rule(
            self.class_name,
            trial,
            list(self.other_trials) or None,
            source=self.source,
            params=dict(self.parameters),
        )
        rule.rule_name = self.name
        return rule

    def rule_class(self) -> type:
        """The rule's class (loading a custom rule's file), its parameters checked."""
        if self.source is None:
            cls: type = BUILTIN_RULES[self.class_name]
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
            coerce(self.class_name, specs[pname], value)
        missing = [s.name for s in specs.values() if s.required and s.name not in self.parameters]
        if missing:
            raise InvalidConfigError(
                f"rule {self.class_name} ({self.source}) needs rule_parameters {missing}"
            )
        return cls

    @classmethod
    def builtin(
        cls,
        base_config: BuiltinRuleConfig | str,
        rule_parameters: Mapping[str, Any] | None = None,
        name: str | None = None,
        collections_to_save: Sequence[CollectionConfig] | None = None,
        actions: Sequence[Action] = (),
        other_trials: Sequence[str | os.PathLike[str]] = (),
    ) -> Rule:
        """A built-in rule from ``rule_configs.<rule>()`` (or its name), parameters overriding
        the config's. The collections it needs are saved by the job's hook."""
        if isinstance(base_config, str):
            base_config = config_for(base_config)
        if not isinstance(base_config, BuiltinRuleConfig):
            raise InvalidConfigError(
                f"Rule.builtin takes rule_configs.<rule>() or a built-in rule name, got "
                f"{base_config!r}; built-in rules: {', '.join(sorted(BUILTIN_RULES))}"
            )
        params = {**base_config.parameters, **_strings(rule_parameters, "rule_parameters")}
        config = config_for(base_config.name, **params)  # unknown or bad parameters fail here
        collections = config.collections + tuple(c.settings() for c in collections_to_save or ())
        if config.parameters.get("stop_training_on_fire") == "true":  # StalledTrainingRule's
            actions = (*actions, StopTraining())
        return cls(
            name or config.name,
            config.name,
            config.parameters,
            None,
            collections,
            tuple(actions),
            tuple(os.fspath(t) for t in other_trials),
        )

    sagemaker = builtin  # the seeds' spelling

    @classmethod
    def custom(
        cls,
        name: str,
        source: str | os.PathLike[str],
        rule_to_invoke: str | None = None,
        rule_parameters: Mapping[str, Any] | None = None,
        collections_to_save: Sequence[CollectionConfig] | None = None,
        actions: Sequence[Action] = (),
        other_trials: Sequence[str | os.PathLike[str]] = (),
        **ignored: Any,
    ) -> Rule:
        """A rule class (``rule_to_invoke``, by default ``name``) from the Python file
        ``source``; ``rule_parameters`` are strings parsed by the class's annotations. The
        collections the class declares (``collections_needed``) are saved by the job's hook,
        with ``collections_to_save``. Cloud arguments of smdebug (``image_uri``,
        ``instance_type``, ...) are accepted and ignored.
        """
        params = _strings(rule_parameters, "rule_parameters")
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
            declared + tuple(c.settings() for c in collections_to_save or ()),
            tuple(actions),
            tuple(trials),
        )

    # -- the job record --
    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "class_name": self.class_name,
            "parameters": dict(self.parameters),
            "source": self.source,
            "collections": [c.to_dict() for c in self.collections],
            "actions": [a.to_dict() for a in self.actions],
            "other_trials": list(self.other_trials),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Rule:
        return cls(
            data["name"],
            data["class_name"],
            data.get("parameters") or {},
            data.get("source"),
            tuple(
                CollectionSettings(c["name"], c.get("parameters") or {})
                for c in data.get("collections") or ()
            ),
            tuple(action_from_dict(a) for a in data.get("actions") or ()),
            tuple(data.get("other_trials") or ()),
        )


def rules_from_specification(specs: Sequence[Mapping[str, Any]]) -> list[Rule]:
    """Rules from the seeds' ``rules_specification`` (``RuleName``, ``SourceS3Uri`` as a local
    path, ``RuntimeConfigurations``); without a source, ``RuleName`` is a built-in rule."""
    if isinstance(specs, str | bytes | Mapping) or not isinstance(specs, Sequence):
        raise InvalidConfigError(
            f"rules_specification must be a list of dicts with RuleName, got {specs!r}"
        )
    rules = []
    for spec in specs:
        if not isinstance(spec, Mapping) or "RuleName" not in spec:
            raise InvalidConfigError(
                f"a rules_specification entry needs RuleName (and SourceS3Uri for a custom "
                f"rule), got {spec!r}"
            )
        params = spec.get("RuntimeConfigurations") or {}
        source = spec.get("SourceS3Uri") or spec.get("Source")
        if source:
            rules.append(Rule.custom(spec["RuleName"], source, rule_parameters=params))
        else:
            rules.append(Rule.builtin(spec["RuleName"], rule_parameters=params))
    return rules


#: The key of a job's ``rules_by_framework`` for every framework without a set of its own.
OTHER_FRAMEWORKS = "*"


def recommended_rules(
    actions: Sequence[Action] = (), stop_on: Sequence[str] = ()
) -> dict[str, list[Rule]]:
    """The recommended rules of each framework (``rule_configs.recommended(framework)``), as a
    job's ``rules_by_framework``: the job runs the set of the framework whose hook writes its
    trial (XGBoost's rules for boosted trees, JAX's for JAX; the deep-learning set, under
    :data:`OTHER_FRAMEWORKS`, for the others). ``actions`` are given to every rule, and
    :class:`StopTraining` to the rules named in ``stop_on``."""
    from tensortap.rules.rule_configs import RECOMMENDED_BY_FRAMEWORK, recommended

    sets = {OTHER_FRAMEWORKS: recommended()}
    sets.update({name: recommended(name) for name in RECOMMENDED_BY_FRAMEWORK})
    known = {config.name for configs in sets.values() for config in configs}
    for name in stop_on:
        if name not in known:
            raise InvalidConfigError(
                f"--stop-on {name}: no recommended rule of that name; they are "
                f"{', '.join(sorted(known))}"
            )
    return {
        framework: [
            Rule.builtin(
                config,
                actions=[*actions, *([StopTraining()] if config.name in stop_on else [])],
            )
            for config in configs
        ]
        for framework, configs in sets.items()
    }


def rules_for_framework(
    rules_by_framework: Mapping[str, Sequence[Rule]], framework: str | None
) -> list[Rule]:
    """The rules of ``rules_by_framework`` for a trial ``framework`` wrote (None: a trial of
    the framework-free hook, or none at all)."""
    found = rules_by_framework.get(framework or "")
    if found is None:
        found = rules_by_framework.get(OTHER_FRAMEWORKS, ())
    return list(found)


# What a job's hook may fill, whatever the framework: a name nearly one of these is a typo.
_KNOWN_COLLECTIONS = (
    *BUILTIN_COLLECTIONS,
    INITIAL_WEIGHTS,
    TRAINING_LOOP,
    *(c for rule in BUILTIN_RULES.values() for c in rule.collections_needed),
)


def hook_config(
    out_dir: str,
    debugger: DebuggerHookConfig | None,
    rules: Sequence[Rule],
    stop_file: str | None,
    tensorboard_dir: str | None = None,
) -> HookConfig:
    """The hook configuration of a job: the user's collections, plus those the rules read (a
    rule's settings fill in what the user did not set)."""
    debugger = debugger or DebuggerHookConfig()
    params = dict(debugger.hook_parameters)
    if rules and not any(k.endswith("save_interval") or k.endswith("save_steps") for k in params):
        params["save_interval"] = JOB_SAVE_INTERVAL
        params["eval.save_interval"] = JOB_EVAL_SAVE_INTERVAL
    merged: dict[str, dict[str, Any]] = {}
    for rule in rules:
        for coll in rule.collections:
            merged.setdefault(coll.name, {}).update(coll.parameters)
    for config in debugger.collection_configs:
        merged.setdefault(config.name, {}).update(config.parameters)
    collections = tuple(CollectionSettings(n, p) for n, p in merged.items())
    if collections and "include_collections" not in params:  # the defaults are saved too
        names = dict.fromkeys([*DEFAULT_INCLUDE_COLLECTIONS, *merged])
        params["include_collections"] = ",".join(names)
    elif "include_collections" in params:
        given = [c.strip() for c in params["include_collections"].split(",") if c.strip()]
        check_included(given, [*_KNOWN_COLLECTIONS, *merged], "the job's hook")
        for rule in rules:
            lacking = [c.name for c in rule.collections if c.name not in given]
            if lacking:  # known before training: say so, and save them
                logger.warning(
                    "rule %s reads %s, which include_collections (%s) leaves out; the job "
                    "saves them too",
                    rule.name,
                    ", ".join(lacking),
                    ",".join(given),
                )
                given += lacking
        params["include_collections"] = ",".join(given)
    return HookConfig(
        out_dir, params, collections, stop_file=stop_file, tensorboard_dir=tensorboard_dir
    )
