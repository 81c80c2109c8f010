"""Where a diagnosis gets what the rules said: a job's rule statuses, or rules run over a trial."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tensortap.diagnosis.verdict import Diagnosis, RuleOutcome, build
from tensortap.exceptions import InvalidConfigError

if TYPE_CHECKING:
    from tensortap.jobs.record import JobRecord
    from tensortap.rules.invoker import RuleSummary
    from tensortap.rules.rule import Rule
    from tensortap.trials.trial import Trial


def outcome_of(summary: RuleSummary) -> RuleOutcome:
    """A finished rule summary as a :class:`RuleOutcome`."""
    gravest = summary.gravest
    finding = None
    if gravest is not None:
        finding = {**gravest.to_dict(), "rule_class": summary.rule}
    return RuleOutcome(summary.rule, summary.status.value, finding, summary.details)


def judge_trial(trial: Trial, rules: Sequence[Rule] | None = None) -> list[RuleSummary]:
    """Run ``rules`` (default: the recommended set of the framework that wrote the trial, at
    its defaults) over every step ``trial`` holds now, walked together; one finished summary
    per rule."""
    from tensortap.rules import create_rule, rule_configs
    from tensortap.rules.invoker import RuleSummary, walk

    if rules is None:
        rules = [
            create_rule(config.name, trial, params=dict(config.parameters))
            for config in rule_configs.recommended(trial.framework())
        ]
    summaries = {id(r): RuleSummary(r.rule_name) for r in rules}
    by_name = {r.rule_name: id(r) for r in rules}
    for found in walk(rules, timeout=0):  # quiet steps counted in runs, not one by one
        summaries[by_name[found.rule]].add(found)
    for rule in rules:
        summaries[id(rule)].finish(rule.no_data_reason())
    return list(summaries.values())


def job_outcomes(rule_statuses: Iterable[Mapping[str, Any]]) -> list[RuleOutcome]:
    """What a job's rules said, from their status records (``summary["rules"]``)."""
    outcomes = []
    for status in rule_statuses:
        name = str(status.get("RuleConfigurationName", "?"))
        finding = status.get("gravest")
        if finding is None and status.get("gravest_step") is not None:  # an older record
            finding = {
                "rule": name,
                "rule_class": status.get("rule_class"),
                "step": status["gravest_step"],
                "message": status.get("gravest_message") or "",
                "severity": status.get("severity") or "problem",
            }
        outcomes.append(
            RuleOutcome(
                name,
                str(status.get("RuleEvaluationStatus", "")),
                finding,
                str(status.get("StatusDetails") or ""),
            )
        )
    return outcomes


def job_diagnosis(summary: Mapping[str, Any]) -> Diagnosis:
    """The diagnosis of a job from its summary (``summary.json``): what its rules said."""
    return build(job_outcomes(summary.get("rules", [])))


def _job_record(target: Any) -> JobRecord | None:
    from tensortap.jobs.job import JobQueries
    from tensortap.jobs.record import JobRecord

    if isinstance(target, JobQueries):
        return JobRecord(target.job_dir)
    from tensortap.storage import local_path

    local = local_path(target) if isinstance(target, (str, os.PathLike)) else None
    if local is not None:  # jobs are local directories
        record = JobRecord(local)
        if record.exists():
            return record
    return None


def diagnose(target: Any, rules: Sequence[Rule] | None = None) -> Diagnosis:
    """One verdict on a run: ``healthy``, ``unknown``, or its most likely root cause first.

    ``target`` is a job (a ``TrainingJob``, an attached job or a job directory: what its rules
    said), or a trial (a ``Trial`` or its location: ``rules``, by default the recommended set,
    are run over what it holds now).
    """
    from tensortap.trials.trial import Trial, create_trial

    if isinstance(target, Diagnosis):
        return target
    record = None if isinstance(target, Trial) else _job_record(target)
    if record is not None:
        from tensortap.jobs.job import job_summary

        return job_diagnosis(job_summary(record))
    if not isinstance(target, (Trial, str, os.PathLike)):
        raise InvalidConfigError(
            "diagnose() takes a trial, a trial's location, a job or a job directory; got "
            f"{type(target).__name__}"
        )
    trial = target if isinstance(target, Trial) else create_trial(target)
    return build(outcome_of(s) for s in judge_trial(trial, rules))
