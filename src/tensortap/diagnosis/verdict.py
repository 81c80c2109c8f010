"""The verdict: moved to :mod:`tensortap.rules.verdict` (a job's supervisor builds it from its
rules' statuses, below the diagnosis of a job or trial); kept here for old imports."""

from tensortap.rules.verdict import (
    JUDGED,
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
    "JUDGED",
    "Diagnosis",
    "Evidence",
    "Problem",
    "RuleOutcome",
    "build",
    "job_diagnosis",
    "job_outcomes",
    "outcome_of",
]
