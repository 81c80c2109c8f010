"""Where the trial of a job is: a job directory (``tensortap run``, ``TrainingJob``) keeps its
trial in ``JOB/trial``, or where its ``job.json`` says (``DebuggerHookConfig(s3_output_path=)``).

Every reader takes a job directory where it takes a trial: :func:`trial_location` turns one
into the other."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tensortap.storage import Store, local_path
from tensortap.storage._descriptors import read_regular

JOB_FILE = "job.json"
TRIAL_DIR = "trial"


def job_trial_location(job_dir: str | os.PathLike[str]) -> str:
    """The trial of the job at ``job_dir``: its ``job.json``'s ``trial_location``, else
    ``job_dir/trial``."""
    try:  # read as a trial's files are: a regular file in the job, never a symlink or FIFO
        text = read_regular(Path(job_dir) / JOB_FILE, job_dir, 32 * 1024 * 1024)
        given = json.loads(text.decode("utf-8"))
        given = given.get("trial_location") if isinstance(given, dict) else None
    except (OSError, ValueError, RecursionError):  # nested too deep: not a job's
        given = None
    if not isinstance(given, str):  # job.json is data: only a string names a place
        given = None
    return str(given) if given else str(Path(job_dir) / TRIAL_DIR)


def trial_location(location: str | os.PathLike[str] | Store) -> str | os.PathLike[str] | Store:
    """``location`` itself, or the job's trial when it is a job directory (a local directory
    holding ``job.json``; jobs are local)."""
    local = local_path(location)
    if local is not None and (Path(local) / JOB_FILE).is_file():
        return job_trial_location(local)
    return location
