"""Rules: analyse a trial step by step, while training runs or after, and say what they found.

Write a rule by subclassing :class:`Rule` and implementing ``invoke_at_step(step) -> bool``;
run it with :func:`invoke_rule`. The built-in rules are importable from here by name.
"""

from tensortap.exceptions import RuleError, RuleEvaluationConditionMet
from tensortap.rules import builtin, rule_configs
from tensortap.rules.builtin import *  # noqa: F403  (every built-in rule, and BUILTIN_RULES)
from tensortap.rules.custom import create_rule, load_rule_class
from tensortap.rules.finding import Finding, Outcome
from tensortap.rules.invoker import (
    RuleStatus,
    RuleSummary,
    invoke_rule,
    iter_findings,
    iter_findings_many,
)
from tensortap.rules.required_tensors import RequiredTensors
from tensortap.rules.rule import Rule, StepSkipped

__all__ = [
    "Finding",
    "Outcome",
    "RequiredTensors",
    "Rule",
    "RuleError",
    "RuleEvaluationConditionMet",
    "RuleStatus",
    "RuleSummary",
    "StepSkipped",
    "create_rule",
    "invoke_rule",
    "iter_findings",
    "iter_findings_many",
    "load_rule_class",
    "rule_configs",
]
__all__ += builtin.__all__
