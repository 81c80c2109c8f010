"""One function per built-in rule: its name, default parameters and the collections it needs.

A job uses these to run a rule and to make the hook save what the rule reads::

    from tensortap.rules import rule_configs
    config = rule_configs.vanishing_gradient(threshold="1e-6")
    config.collections  # (CollectionSettings("gradients"),)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tensortap.core._hook_settings import CollectionSettings
from tensortap.exceptions import InvalidConfigError
from tensortap.rules._params import coerce
from tensortap.rules._registry import (
    REGISTRY,
    config_name,
    find_rule,
    unknown_rule,
)
from tensortap.rules._rule import Rule
from tensortap.rules.builtin import BUILTIN_RULES


@dataclass(frozen=True)
class BuiltinRuleConfig:
    """A built-in rule ready to configure: ``parameters`` hold every parameter as a string."""

    name: str
    parameters: dict[str, str]
    collections: tuple[CollectionSettings, ...] = field(default_factory=tuple)

    @property
    def rule_class(self) -> type[Rule]:
        return REGISTRY[self.name]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "parameters": dict(self.parameters),
            "collections": [
                {"name": c.name, "parameters": dict(c.parameters)} for c in self.collections
            ],
        }


def _as_string(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_as_string(v) for v in value)
        return f"({inner})" if isinstance(value, tuple) else inner
    if hasattr(value, "name") and not isinstance(value, str):  # ModeKeys
        return str(value.name)
    return str(value)


def config_for(name: str, **params: Any) -> BuiltinRuleConfig:
    """The configuration of built-in rule ``name`` with ``params`` (strings or values) over its
    defaults; unknown parameters and unparseable values fail here."""
    cls = find_rule(name, config_names=False)
    if cls is None:
        raise InvalidConfigError(unknown_rule(name, REGISTRY))
    specs = {s.name: s for s in cls.parameters()}
    unknown = sorted(set(params) - set(specs) - {"other_trials"})
    if unknown:
        raise InvalidConfigError(
            f"rule {name} has no parameter {unknown[0]!r} (given {params[unknown[0]]!r}); "
            f"its parameters are {', '.join(specs) or 'none'}"
        )
    values: dict[str, str] = {}
    coerced: dict[str, Any] = {}
    for pname, spec in specs.items():
        if pname in params:
            coerced[pname] = coerce(name, spec, params[pname])
            values[pname] = _as_string(coerced[pname])
        elif spec.default is not inspect.Parameter.empty:
            values[pname] = _as_string(spec.default)
    cls.check_parameters(**coerced)  # its checks of the values, without a trial
    collections = tuple(
        CollectionSettings(c, cls.collection_parameters.get(c, {}))
        for c in cls.required_collections(**params)
    )
    return BuiltinRuleConfig(name, values, collections)


def _snake(name: str) -> str:
    """The helper name of the registered rule ``name`` (``nan_inf_root_cause``)."""
    return config_name(REGISTRY[name])


def _make(name: str) -> Callable[..., BuiltinRuleConfig]:
    made = _MADE.get(name)
    if made is not None:
        return made

    def configure(**params: Any) -> BuiltinRuleConfig:
        return config_for(name, **params)

    configure.__name__ = _snake(name)
    configure.__qualname__ = configure.__name__
    configure.__doc__ = f"The configuration of the built-in rule {name} (see docs/rules.md)."
    _MADE[name] = configure
    return configure


_MADE: dict[str, Callable[..., BuiltinRuleConfig]] = {}


# One helper per registered rule, named after it in snake case (``vanishing_gradient()``),
# read from the registry when asked for: a new rule needs no line here.
def __getattr__(name: str) -> Callable[..., BuiltinRuleConfig]:
    cls = None if name.startswith("_") else find_rule(name)
    if cls is None or config_name(cls) != name:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _make(cls.__name__)


def _helper_names() -> list[str]:
    """The names of the helpers, one per registered rule (``vanishing_gradient``...); an
    installed rule's once it is loaded (asking for its helper loads it)."""
    return sorted(config_name(cls) for cls in REGISTRY.values())


def __dir__() -> list[str]:
    return sorted([*globals(), *_helper_names()])


#: The rules run when none is named (``tensortap run`` without ``--rule``, the report): the
#: built-ins that judge a deep-learning run, at their defaults. Each must be quiet on healthy
#: training (bench/detection measures it).
RECOMMENDED = (
    "ExplodingTensor",
    "NaNInfRootCause",
    "VanishingGradient",
    "GradientNormSpike",
    "LossNotDecreasing",
    "LossSpike",
    "Overfit",
    "Overtraining",
    "WeightUpdateRatio",
    "WeightsNotUpdating",
    "DeadRelu",
    "SaturatedActivation",
    "PoorWeightInitialization",
    "CheckInputImages",
    "ClassImbalance",
    "AllZero",
    "TrainingLoop",
    "UnnormalisedInput",
    "AccuracyAtChance",
    "FrozenLayer",
)


#: The rules for boosted trees (a trial the XGBoost hook wrote), at their defaults: a feature
#: that holds most of the importance (a label leak), trees that never grow, the labels' and
#: the validation predictions' classes, and the booster's own training and validation metric
#: (``train-logloss`` against ``validation-logloss``). Their defaults read the booster's
#: settings the hook saved (TreeDepth: ``max_depth``).
RECOMMENDED_XGBOOST = (
    "FeatureImportanceOverweight",
    "TreeDepth",
    "ClassImbalance",
    "Confusion",
    "LossNotDecreasing",
    "Overfit",
    "Overtraining",
)

#: The rules for JAX, Flax and Optax training: what the JAX hook and its zero-code-change
#: support save (the loss, gradients, weights: no activations, inputs or evaluation passes).
RECOMMENDED_JAX = (
    "ExplodingTensor",
    "NaNInfRootCause",
    "VanishingGradient",
    "GradientNormSpike",
    "LossNotDecreasing",
    "LossSpike",
    "WeightUpdateRatio",
    "WeightsNotUpdating",
    "PoorWeightInitialization",
    "AllZero",
)

#: The rules for a run imported from another tracker (``tensortap import``: TensorBoard,
#: MLflow, W&B, Neptune): its scalars only, the loss among them (no gradients, weights or
#: activations to judge).
RECOMMENDED_SCALARS = (
    "ExplodingTensor",
    "NaNInfRootCause",
    "LossNotDecreasing",
    "LossSpike",
    "Overfit",
    "Overtraining",
)

#: The recommended set of each framework whose hook records it (``Trial.framework()``); any
#: other framework (PyTorch, Keras, MXNet, the framework-free hook) gets :data:`RECOMMENDED`.
RECOMMENDED_BY_FRAMEWORK = {"xgboost": RECOMMENDED_XGBOOST, "jax": RECOMMENDED_JAX}
#: The "frameworks" of runs imported from other trackers (no job runs them: not in the sets
#: a job records), each judged with :data:`RECOMMENDED_SCALARS`.
IMPORTED_FORMATS = ("tensorboard", "mlflow", "wandb", "neptune")


def recommended_names(framework: str | None = None) -> tuple[str, ...]:
    """The names of :func:`recommended`'s rules."""
    if framework in IMPORTED_FORMATS:
        return RECOMMENDED_SCALARS
    return RECOMMENDED_BY_FRAMEWORK.get(framework or "", RECOMMENDED)


def recommended(framework: str | None = None) -> list[BuiltinRuleConfig]:
    """The recommended rule set of ``framework`` at its defaults (see
    :data:`RECOMMENDED_BY_FRAMEWORK`; by default the deep-learning set, :data:`RECOMMENDED`)."""
    return [config_for(name) for name in recommended_names(framework)]


__all__ = [
    "RECOMMENDED",
    "RECOMMENDED_BY_FRAMEWORK",
    "RECOMMENDED_JAX",
    "RECOMMENDED_SCALARS",
    "IMPORTED_FORMATS",
    "RECOMMENDED_XGBOOST",
    "BuiltinRuleConfig",
    "config_for",
    "recommended",
    "recommended_names",
    *sorted(config_name(cls) for cls in BUILTIN_RULES.values()),  # the built-in rules'
]
