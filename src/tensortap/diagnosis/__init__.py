"""One diagnosis per run: ``diagnose(trial_or_job)`` turns the rules' findings into a verdict.

*healthy* (rules judged the run and none found a problem), *unknown* (none could judge it),
*failed* (a job whose training raised or was killed: how it ended, then what the rules saw), or
the most likely root cause first, with its evidence in time order and a fix to try; what
followed from the cause is folded under it. See docs/rules.md, "One diagnosis per run".
"""

from tensortap.diagnosis._sources import diagnose, judge_trial
from tensortap.rules._causes import CAUSES, RULE_CAUSES, Cause, cause_of
from tensortap.rules._verdict import (
    Diagnosis,
    Evidence,
    Problem,
    RuleOutcome,
    build,
    job_diagnosis,
    job_outcomes,
    outcome_of,
)

__all__ = [
    "CAUSES",
    "RULE_CAUSES",
    "Cause",
    "Diagnosis",
    "Evidence",
    "Problem",
    "RuleOutcome",
    "build",
    "cause_of",
    "diagnose",
    "job_diagnosis",
    "job_outcomes",
    "judge_trial",
    "outcome_of",
]
