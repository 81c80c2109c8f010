"""Where a hook writes inside a job's training process (``$TENSORTAP_JOB_DIR``): the job's trial,
whatever ``out_dir`` says, as smdebug's hooks wrote to the SageMaker job's output, so that the
job's rules judge what the script's own hook saves; and with the writer options the job set."""

from __future__ import annotations

import logging
import os
from typing import Any

from tensortap.exceptions import InvalidConfigError
from tensortap.hook._config import CONFIG_ENV, JOB_ENV, read_config
from tensortap.hook._open import OpenHook, open_hooks
from tensortap.storage import Store
from tensortap.writer import WriterOptions

logger = logging.getLogger("tensortap.hook")  # the hook's one logger


def in_job_trial(out_dir: str | os.PathLike[str] | Store, worker: str) -> Any:
    """Where a hook writes: inside a job's training process (``$TENSORTAP_JOB_DIR``), the job's
    trial whatever ``out_dir`` says, as smdebug's hooks wrote to the SageMaker job's output, so
    that the job's rules judge what the script's own hook saves. ``out_dir`` stays where a hook
    of this process already writes the job's trial as the same worker (one writer a worker)."""
    config_file = os.environ.get(CONFIG_ENV)
    if not os.environ.get(JOB_ENV) or not config_file or isinstance(out_dir, Store):
        return out_dir
    try:
        trial = read_config(config_file).out_dir
    except (InvalidConfigError, OSError):
        return out_dir
    asked, job_trial = os.fspath(out_dir), os.fspath(trial)
    if "://" not in asked + job_trial:
        asked, job_trial = os.path.abspath(asked), os.path.abspath(job_trial)
    if asked.rstrip("/") == job_trial.rstrip("/"):
        return out_dir
    taken = any(h.worker == worker and _writes(h, job_trial) for h in open_hooks())
    if taken:
        logger.warning(
            "tensortap: another hook of this process writes the job's trial %s as %s; this one "
            "writes %s as asked, and the job's rules do not read it",
            trial,
            worker,
            out_dir,
        )
        return out_dir
    logger.warning(
        "tensortap: this script runs as a job: its hook writes the job's trial %s, not %s "
        "(as smdebug's hooks wrote to the SageMaker job's output), so the job's rules judge it",
        trial,
        out_dir,
    )
    return trial


def job_writer_options(out_dir: str | os.PathLike[str] | Store) -> WriterOptions | None:
    """The writer options a job set, for a hook that writes the job's trial and was given
    none (a hook the script makes, as one the job attaches)."""
    config_file = os.environ.get(CONFIG_ENV)
    if not os.environ.get(JOB_ENV) or not config_file or isinstance(out_dir, Store):
        return None
    try:
        config = read_config(config_file)
    except (InvalidConfigError, OSError):
        return None
    asked, job_trial = os.fspath(out_dir), config.out_dir
    if "://" not in asked + job_trial:
        asked, job_trial = os.path.abspath(asked), os.path.abspath(job_trial)
    return config.writer_options if asked.rstrip("/") == job_trial.rstrip("/") else None


def _writes(hook: OpenHook, location: str) -> bool:
    """Whether ``hook`` writes the trial at ``location`` (a path or URL)."""
    mine = hook.out_dir if "://" in hook.out_dir else os.path.abspath(hook.out_dir)
    return mine.rstrip("/") == location.rstrip("/") and not hook.closed
