"""What a training job is configured with: the hook's collections, TensorBoard output, rules.

Names follow the SageMaker SDK of the seeds (``DebuggerHookConfig``, ``CollectionConfig``,
``TensorBoardOutputConfig``, ``Rule.builtin``/``Rule.sagemaker``, ``Rule.custom``) so notebooks
translate by changing the import. Every object is frozen and validated when built: a bad rule
name, parameter or collection setting fails here, before any training starts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tensortap.core._collections import (
    BUILTIN_COLLECTIONS,
    INITIAL_WEIGHTS,
    TRAINING_LOOP,
    check_included,
)
from tensortap.core._save_budget import DEFAULT_SAVE_BUDGET, SAVE_BUDGET_ENV, parse_save_budget
from tensortap.core._vitals import VITALS
from tensortap.exceptions import InvalidConfigError
from tensortap.hook._config import CollectionSettings, HookConfig, HookSettings
from tensortap.hook._hook import DEFAULT_INCLUDE_COLLECTIONS
from tensortap.jobs._actions import Action, RollbackTraining, StopTraining, action_from_dict
from tensortap.rules._spec import RuleSpec, rule_spec_fields, string_parameters
from tensortap.rules.builtin import BUILTIN_RULES
from tensortap.rules.rule_configs import BuiltinRuleConfig
from tensortap.writer._options import WriterOptions

#: The hook's save interval in a job whose user set none: rules need more than every 500th step.
JOB_SAVE_INTERVAL = "10"
#: ... and of EVAL steps: every one, so that rules compare whole evaluation passes (different
#: validation batches are not comparable one by one).
JOB_EVAL_SAVE_INTERVAL = "1"

logger = logging.getLogger(__name__)

_strings = string_parameters


@dataclass(frozen=True)
class CollectionConfig:
    """A collection the hook saves, with string parameters (``include_regex``,
    ``save_interval``, ``save_steps``, ``reductions``, ... as in :mod:`tensortap.hook._config`)."""

    name: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    _settings: CollectionSettings = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters", _strings(self.parameters, "parameters"))
        # parsed (and so validated) now, once
        object.__setattr__(self, "_settings", CollectionSettings(self.name, self.parameters))

    def settings(self) -> CollectionSettings:
        return self._settings


@dataclass(frozen=True)
class DebuggerHookConfig:
    """The hook of the training job: hook-wide parameters and per-collection settings.

    The trial is written inside the job's directory, or, with ``s3_output_path`` (an
    ``s3://bucket/prefix`` URL or a directory), at ``{s3_output_path}/{job_name}/debug-output``
    as SageMaker lays it out (see ``TrainingJob.debugger_artifacts_path``).

    ``writer_options`` sets the training process's background writer: a
    :class:`~tensortap.writer.WriterOptions`, or a dict of its fields (``flush_secs``,
    ``idle_flush_secs``, ``when_full``, ``max_queue_bytes``, ...; values may be strings)."""

    hook_parameters: Mapping[str, Any] = field(default_factory=dict)
    collection_configs: Sequence[CollectionConfig] = ()
    s3_output_path: str | None = None
    writer_options: WriterOptions | Mapping[str, Any] | None = None
    _settings: HookSettings = field(init=False, compare=False, repr=False)

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
        # parsed (and so validated) now, once: the job's hook configuration takes these values
        object.__setattr__(self, "_settings", HookSettings(self.hook_parameters))
        options = self.writer_options
        if options is not None and not isinstance(options, WriterOptions):
            try:
                options = WriterOptions.from_dict(options)
            except InvalidConfigError as exc:
                raise InvalidConfigError(
                    f"writer_options: {exc} (pass a WriterOptions or a dict of its fields)"
                ) from None
            object.__setattr__(self, "writer_options", options)

    @property
    def settings(self) -> HookSettings:
        """The parsed hook parameters."""
        return self._settings

    def trial_location(self, job_name: str, default: str) -> str:
        """Where a job of this name writes its trial (``default`` without s3_output_path)."""
        if self.s3_output_path is None:
            return default
        return f"{self.s3_output_path.rstrip('/')}/{job_name}/debug-output"


@dataclass(frozen=True)
class TensorBoardOutputConfig:
    """Where TensorBoard event files go (default: ``tensorboard/`` in the job directory)."""

    local_path: str | None = None


@dataclass(frozen=True, init=False)
class JobRule(RuleSpec):
    """A rule of a job: a :class:`~tensortap.rules._spec.RuleSpec` and the actions taken when
    it fires. Build it with :meth:`builtin` (alias :meth:`sagemaker`) or :meth:`custom`;
    ``name`` is its configuration name in statuses and logs. Public as
    ``tensortap.jobs.Rule`` (the SageMaker SDK's name)."""

    actions: tuple[Action, ...] = ()

    def __init__(
        self,
        name: str,
        class_name: str,
        parameters: Mapping[str, str] | None = None,
        source: str | None = None,
        collections: tuple[CollectionSettings, ...] = (),
        actions: Sequence[Action] = (),
        other_trials: Sequence[str] = (),
        module: str | None = None,
    ) -> None:
        # the fields in the order they always had (the spec's, with actions before
        # other_trials), so that positional construction keeps working
        values = (name, class_name, parameters or {}, source, collections, actions)
        for key, value in zip(
            ("name", "class_name", "parameters", "source", "collections", "actions"),
            values,
            strict=True,
        ):
            object.__setattr__(self, key, value)
        object.__setattr__(self, "other_trials", other_trials)
        object.__setattr__(self, "module", module)
        self.__post_init__()

    def __post_init__(self) -> None:
        object.__setattr__(self, "actions", tuple(self.actions))
        for action in self.actions:
            if not isinstance(action, Action):
                raise InvalidConfigError(
                    f"actions must be tensortap.jobs actions (StopTraining, RollbackTraining, "
                    f"Webhook, Email, Command, Call), got {action!r}"
                )
        super().__post_init__()

    @classmethod
    def _of(cls, spec: RuleSpec, actions: Sequence[Action]) -> JobRule:
        return cls(
            spec.name,
            spec.class_name,
            spec.parameters,
            spec.source,
            spec.collections,
            tuple(actions),
            spec.other_trials,
            spec.module,
        )

    @classmethod
    def builtin(  # type: ignore[override]
        cls,
        base_config: BuiltinRuleConfig | str,
        rule_parameters: Mapping[str, Any] | None = None,
        name: str | None = None,
        collections_to_save: Sequence[CollectionConfig] | None = None,
        actions: Sequence[Action] = (),
        other_trials: Sequence[str | os.PathLike[str]] = (),
    ) -> JobRule:
        """A built-in (or registered) rule from ``rule_configs.<rule>()`` (or its name),
        parameters overriding the config's. The collections it needs are saved by the job's
        hook."""
        spec = RuleSpec.builtin(
            base_config,
            rule_parameters,
            name,
            tuple(c.settings() for c in collections_to_save or ()),
            other_trials,
        )
        if spec.parameters.get("stop_training_on_fire") == "true":  # StalledTrainingRule's
            actions = (*actions, StopTraining())
        return cls._of(spec, actions)

    sagemaker = builtin  # the seeds' spelling

    @classmethod
    def custom(  # type: ignore[override]
        cls,
        name: str,
        source: str | os.PathLike[str],
        rule_to_invoke: str | None = None,
        rule_parameters: Mapping[str, Any] | None = None,
        collections_to_save: Sequence[CollectionConfig] | None = None,
        actions: Sequence[Action] = (),
        other_trials: Sequence[str | os.PathLike[str]] = (),
        **ignored: Any,
    ) -> JobRule:
        """A rule class (``rule_to_invoke``, by default ``name``) from the Python file
        ``source``; ``rule_parameters`` are strings parsed by the class's annotations. The
        collections the class declares (``collections_needed``) are saved by the job's hook,
        with ``collections_to_save``. Cloud arguments of smdebug (``image_uri``,
        ``instance_type``, ...) are accepted and ignored.
        """
        spec = RuleSpec.custom(
            name,
            source,
            rule_to_invoke,
            rule_parameters,
            tuple(c.settings() for c in collections_to_save or ()),
            other_trials,
        )
        return cls._of(spec, actions)

    # -- the job record --
    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["actions"] = [a.to_dict() for a in self.actions]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobRule:
        fields = rule_spec_fields(data)
        actions = tuple(action_from_dict(a) for a in data.get("actions") or ())
        return cls(**fields, actions=actions)


#: The SageMaker SDK's name of a job's rule (``Rule.builtin(rule_configs.<rule>())``).
Rule = JobRule


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
    actions: Sequence[Action] = (), stop_on: Sequence[str] = (), rollback_on: Sequence[str] = ()
) -> dict[str, list[Rule]]:
    """The recommended rules of each framework (``rule_configs.recommended(framework)``), as a
    job's ``rules_by_framework``: the job runs the set of the framework whose hook writes its
    trial (XGBoost's rules for boosted trees, JAX's for JAX; the deep-learning set, under
    :data:`OTHER_FRAMEWORKS`, for the others). ``actions`` are given to every rule, and
    :class:`StopTraining` to the rules named in ``stop_on``, :class:`RollbackTraining` to those
    in ``rollback_on``."""
    from tensortap.rules.rule_configs import RECOMMENDED_BY_FRAMEWORK, recommended

    sets = {OTHER_FRAMEWORKS: recommended()}
    sets.update({name: recommended(name) for name in RECOMMENDED_BY_FRAMEWORK})
    known = {config.name for configs in sets.values() for config in configs}
    for flag, names in (("--stop-on", stop_on), ("--rollback-on", rollback_on)):
        for name in names:
            if name not in known:
                raise InvalidConfigError(
                    f"{flag} {name}: no recommended rule of that name; they are "
                    f"{', '.join(sorted(known))}"
                )
    return {
        framework: [
            Rule.builtin(
                config,
                actions=[
                    *actions,
                    *([StopTraining()] if config.name in stop_on else []),
                    *([RollbackTraining()] if config.name in rollback_on else []),
                ],
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
    VITALS,
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
    # The user's values were parsed when the DebuggerHookConfig was made: they are taken as
    # they are. Only what the job adds is parsed here (its default schedule, and a collection
    # that rules and the user both configure, whose parameters merge key by key).
    settings = debugger.settings
    params = dict(settings)
    own_schedule = any(k.endswith("save_interval") or k.endswith("save_steps") for k in params)
    if rules and not own_schedule:
        params["save_interval"] = JOB_SAVE_INTERVAL
        params["eval.save_interval"] = JOB_EVAL_SAVE_INTERVAL
        # the schedule is the job's: its saves stay within the budget (core._save_budget)
        params.setdefault("save_budget", job_save_budget())
        settings = HookSettings(params)
    elif own_schedule and settings.save_budget is not None:
        logger.warning(
            "save_budget=%s is left out: it governs the schedule a job chooses, and this job's "
            "hook parameters set their own (%s), which is kept exactly",
            params["save_budget"],
            ", ".join(k for k in params if k.endswith(("save_interval", "save_steps"))),
        )
        params.pop("save_budget")
        settings = HookSettings(params)
    merged: dict[str, list[CollectionSettings]] = {}
    for rule in rules:
        for coll in rule.collections:
            merged.setdefault(coll.name, []).append(coll)
    for config in debugger.collection_configs:
        merged.setdefault(config.name, []).append(config.settings())
    collections = tuple(_merged(name, given) for name, given in merged.items())
    if collections and "include_collections" not in params:  # the defaults are saved too
        names = dict.fromkeys([*DEFAULT_INCLUDE_COLLECTIONS, *merged])
        settings = settings.with_include_collections(tuple(names))
    elif "include_collections" in params:
        given = list(settings.include_collections or ())
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
        if VITALS not in given:  # a job saves every step's vital signs (core._vitals)
            given.append(VITALS)
        settings = settings.with_include_collections(tuple(given))
    options = debugger.writer_options
    return HookConfig(
        out_dir,
        settings,
        collections,
        stop_file=stop_file,
        tensorboard_dir=tensorboard_dir,
        writer_options=options if isinstance(options, WriterOptions) else None,  # typed above
    )


def job_save_budget() -> str:
    """The save budget of a job's default schedule: ``$TENSORTAP_SAVE_BUDGET`` (``0.05``,
    ``off``), checked here, else :data:`~tensortap.core._save_budget.DEFAULT_SAVE_BUDGET`."""
    given = os.environ.get(SAVE_BUDGET_ENV)
    if given is None:
        return str(DEFAULT_SAVE_BUDGET)
    budget = parse_save_budget(given, f"${SAVE_BUDGET_ENV}")
    return "off" if budget is None else str(budget)


def _merged(name: str, given: list[CollectionSettings]) -> CollectionSettings:
    """One collection's settings from the rules' and the user's (later ones win key by key)."""
    if len(given) == 1:
        return given[0]
    parameters: dict[str, Any] = {}
    for settings in given:
        parameters.update(settings.parameters)
    return CollectionSettings(name, parameters)
