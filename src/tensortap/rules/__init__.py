"""Rules: analyse a trial step by step, while training runs or after, and say what they found.

Write a rule by subclassing :class:`Rule` and implementing ``invoke_at_step(step) -> bool``;
run it with :func:`invoke_rule`. The built-in rules are importable from here by name, and so
is a rule registered with :func:`register_rule` (which configurations and jobs can then name).
"""

from typing import Any

from tensortap.exceptions import RuleError, RuleEvaluationConditionMet
from tensortap.rules import builtin, rule_configs
from tensortap.rules._custom import create_rule, load_rule_class
from tensortap.rules._finding import Finding, Outcome
from tensortap.rules._invoker import (
    RuleStatus,
    RuleSummary,
    invoke_rule,
    iter_findings,
    iter_findings_many,
)
from tensortap.rules._registry import find_rule, known_rules, register_rule, unregister_rule
from tensortap.rules._required_tensors import RequiredTensors
from tensortap.rules._rule import Rule, StepSkipped
from tensortap.rules._spec import RuleSpec
from tensortap.rules.builtin import *  # noqa: F403  (every built-in rule, and BUILTIN_RULES)

__all__ = [
    "Finding",
    "Outcome",
    "RequiredTensors",
    "Rule",
    "RuleError",
    "RuleEvaluationConditionMet",
    "RuleSpec",
    "RuleStatus",
    "RuleSummary",
    "StepSkipped",
    "create_rule",
    "invoke_rule",
    "iter_findings",
    "iter_findings_many",
    "known_rules",
    "load_rule_class",
    "register_rule",
    "rule_configs",
    "unregister_rule",
]
__all__ += builtin.__all__


def __getattr__(name: str) -> Any:
    """A rule registered after this package was imported, or installed (an entry point)."""
    cls = None if name.startswith("_") else find_rule(name, config_names=False)
    if cls is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return cls
