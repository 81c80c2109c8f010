"""The two halves both detection benchmarks share: train a program into a trial with the hook
a job attaches for the recommended rules, and evaluate those rules over a finished trial."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import tensortap.pytorch as tt
from bench.detection.score import ProgramResult
from tensortap.jobs.specs import Rule as RuleSpec
from tensortap.jobs.specs import hook_config
from tensortap.rules import create_rule, iter_findings_many, rule_configs
from tensortap.rules.invoker import RuleSummary


def recommended_specs() -> list[RuleSpec]:
    """The recommended rule set at its defaults, as a job's rule specs."""
    return [RuleSpec.builtin(config) for config in rule_configs.recommended()]


def train_into_trial(out: str | Path, program: Callable[[tt.Hook], None]) -> None:
    """Run ``program`` with the hook a job attaches for the recommended rules, writing its
    trial at ``out``; the hook is closed whatever happens."""
    hook = hook_config(str(out), None, recommended_specs(), None).create_hook(tt.Hook)
    try:
        program(hook)
    finally:
        hook.close()


def evaluate_trial(out: str | Path, name: str, label: str) -> ProgramResult:
    """Evaluate the recommended rules over the finished trial at ``out``: per rule, the first
    of its gravest triggered findings, and the rules that had no data to judge."""
    trial = tt.create_trial(str(out))
    rules = [
        create_rule(s.class_name, trial, params=dict(s.parameters)) for s in recommended_specs()
    ]
    summaries = {r.rule_name: RuleSummary(r.rule_name) for r in rules}
    for finding in iter_findings_many(rules, timeout=0):
        summaries[finding.rule].add(finding)
    result = ProgramResult(name, label)
    for summary in summaries.values():
        summary.finish()
        worst = summary.worst_severity  # the first of the gravest findings speaks for the rule
        gravest = next((f for f in summary.findings if f.triggered and f.severity == worst), None)
        if gravest is not None:
            result.findings.append(gravest.to_dict())
        if summary.status.value == "NoData":
            result.no_data.append(summary.rule)
    return result
