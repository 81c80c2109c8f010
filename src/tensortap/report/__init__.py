"""Reports: self-contained HTML pages about a trial (``tensortap report``)."""

from __future__ import annotations

import os
from pathlib import Path

from tensortap.jobs._record import JobRecord
from tensortap.report._training import (
    report_trial,
    rules_that_find_problems,
    training_report,
    write_training_report,
)
from tensortap.report._xgboost import write_xgboost_report, xgboost_report
from tensortap.trials._trial import Trial, create_trial


def is_xgboost(trial: Trial) -> bool:
    """A trial written by the XGBoost hook (its trees or feature importance were saved)."""
    return any(n.startswith(("trees/", "feature_importance/")) for n in trial.tensor_names())


def write_report(
    trial: Trial | str | os.PathLike[str],
    out: str | os.PathLike[str],
    job: JobRecord | str | os.PathLike[str] | None = None,
    location: str | None = None,
) -> Path:
    """The report that fits the trial: XGBoost's for boosted trees, else the training report
    (a trial given as a location, or opened with ``records=False``, is read only as far as
    the page needs: see :func:`~tensortap.report._training.report_trial`). ``location`` names
    where the trial is on the page (its path when None: see
    :func:`~tensortap.report._page.page`)."""
    if not isinstance(trial, Trial):
        trial = create_trial(trial, records=False)
    if is_xgboost(trial):
        whole = trial if trial.records else Trial(trial.store, name=trial.name)
        return write_xgboost_report(whole, out, location=location)  # it reads the importances
    return write_training_report(trial, out, job, location=location)


__all__ = [
    "is_xgboost",
    "report_trial",
    "rules_that_find_problems",
    "training_report",
    "write_report",
    "write_training_report",
    "write_xgboost_report",
    "xgboost_report",
]
