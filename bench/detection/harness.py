"""The two halves both detection benchmarks share: train a program into a trial with the hook
a job attaches for the recommended rules, and evaluate those rules over a finished trial."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import tensortap.pytorch as tt
from bench.detection.score import ProgramResult
from tensortap.diagnosis import build, judge_trial, outcome_of
from tensortap.jobs._specs import DebuggerHookConfig, hook_config
from tensortap.jobs._specs import Rule as RuleSpec
from tensortap.rules import rule_configs


def recommended_specs() -> list[RuleSpec]:
    """The recommended rule set at its defaults, as a job's rule specs."""
    return [RuleSpec.builtin(config) for config in rule_configs.recommended()]


def train_into_trial(out: str | Path, program: Callable[[tt.Hook], None]) -> None:
    """Run ``program`` with the hook a job attaches for the recommended rules, writing its
    trial at ``out``; the hook is closed whatever happens."""
    # the save budget off: a job's default schedule, never widened by this machine's load, so
    # the scores do not depend on how busy it was (tensortap.core._save_budget)
    pinned = DebuggerHookConfig(hook_parameters={"save_budget": "off"})
    hook = hook_config(str(out), pinned, recommended_specs(), None).create_hook(tt.Hook)
    try:
        program(hook)
    finally:
        hook.close()


def evaluate_trial(out: str | Path, name: str, label: str) -> ProgramResult:
    """Evaluate the recommended rules over the finished trial at ``out``: per rule, the first
    of its gravest triggered findings, the rules that had no data to judge, and the run's
    diagnosis (``tensortap.diagnose``'s verdict and root causes) from them."""
    summaries = judge_trial(tt.create_trial(str(out)))  # the recommended set at its defaults
    result = ProgramResult(name, label)
    for summary in summaries:
        if summary.gravest is not None:  # the first of the gravest findings speaks for the rule
            result.findings.append(summary.gravest.to_dict())
        if summary.status.value == "NoData":
            result.no_data.append(summary.rule)
    found = build(outcome_of(s) for s in summaries)
    result.verdict, result.headline = found.verdict, found.headline()
    result.first_cause = None if found.cause is None else found.cause.id
    result.causes = list(found.causes)
    return result
