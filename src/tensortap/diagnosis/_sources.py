"""Where a diagnosis gets what the rules said: a job's rule statuses, or rules run over a trial
(the verdict itself, and a job's from its summary, are built in :mod:`tensortap.rules._verdict`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tensortap.exceptions import InvalidConfigError
from tensortap.rules._verdict import Diagnosis, build, job_diagnosis, outcome_of

if TYPE_CHECKING:
    from tensortap.jobs._record import JobRecord
    from tensortap.rules._invoker import RuleSummary
    from tensortap.rules._rule import Rule
    from tensortap.trials._trial import Trial


def judge_trial(trial: Trial, rules: Sequence[Rule] | None = None) -> list[RuleSummary]:
    """Run ``rules`` (default: the recommended set of the framework that wrote the trial, at
    its defaults) over every step ``trial`` holds now, walked together; one finished summary
    per rule."""
    from tensortap.rules import create_rule, rule_configs
    from tensortap.rules._invoker import RuleSummary, walk

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


def _job_record(target: Any) -> JobRecord | None:
    from tensortap.jobs._job import JobQueries
    from tensortap.jobs._record import JobRecord

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
    from tensortap.trials._trial import Trial, create_trial

    if isinstance(target, Diagnosis):
        return target
    record = None if isinstance(target, Trial) else _job_record(target)
    if record is not None:
        from tensortap.jobs._job import job_summary

        return job_diagnosis(job_summary(record))
    if not isinstance(target, (Trial, str, os.PathLike)):
        raise InvalidConfigError(
            "diagnose() takes a trial, a trial's location, a job or a job directory; got "
            f"{type(target).__name__}"
        )
    trial = target if isinstance(target, Trial) else create_trial(target)
    return build(outcome_of(s) for s in judge_trial(trial, rules))
