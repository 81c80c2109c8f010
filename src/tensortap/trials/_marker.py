"""Whether a root holds a trial, read when a trial is opened: its marker (``.tensortap-trial``)
checked, a root that holds other things refused, one that holds nothing yet read as empty."""

from __future__ import annotations

import logging
from collections.abc import Callable

from tensortap.exceptions import (
    FormatError,
    NotATrialError,
    StorageError,
    UnsupportedFormatVersion,
)
from tensortap.format._documents import decode_json
from tensortap.format._layout import TRIAL_MARKER
from tensortap.storage._base import Store
from tensortap.storage._resolve import what_is_there

logger = logging.getLogger("tensortap.trials._index")  # (the name its messages always had)


def check_marker(
    store: Store,
    path: str,
    must_exist: bool,
    warn: bool,
    problem: Callable[[str, BaseException], None],
) -> None:
    """Refuse a root that holds other things but no trial; read a trial whose marker is
    damaged or missing (next to ``workers/``) with a problem; refuse a newer trial. A root
    that holds nothing yet is refused if ``must_exist``, else read as empty (saying so at
    WARNING if ``warn``, else at INFO)."""
    try:
        raw = store.get(TRIAL_MARKER)
    except StorageError as exc:  # not a regular file: read what is there, and say so
        problem(TRIAL_MARKER, exc)
        return
    except KeyError:
        entries = [e for e in store.list_dir("") if not e.startswith(".")]
        if TRIAL_MARKER not in entries:
            if "workers" in entries:  # a trial that lost its marker: read what is there
                problem(TRIAL_MARKER, FormatError("the trial marker is missing; workers/ is read"))
                return
            if entries:
                shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
                raise NotATrialError(
                    f"{path} holds no tensortap trial (no {TRIAL_MARKER}; found "
                    f"{shown}). Point create_trial at the out_dir given to a Hook"
                ) from None
            _nothing_yet(store, path, must_exist, warn)
            return
        raw = store.get(TRIAL_MARKER)  # written between the two looks: being created
    try:
        decode_json(raw, "tensortap-trial", f"{path}/{TRIAL_MARKER}")
    except UnsupportedFormatVersion:
        raise
    except FormatError as exc:  # the marker is corrupt, not newer: read what is there
        problem(TRIAL_MARKER, exc)


def _nothing_yet(store: Store, path: str, must_exist: bool, warn: bool) -> None:
    what = what_is_there(store)
    if must_exist:
        raise NotATrialError(
            f"no trial at {path}: {what}. Point create_trial at the out_dir given to a "
            "Hook (or at a job's directory), or leave must_exist out to wait for training "
            "to write it"
        )
    logger.log(
        logging.WARNING if warn else logging.INFO,
        "no trial at %s yet: %s. It is read as training writes it; if training should have "
        "written it by now, check the path (create_trial(..., must_exist=True) raises "
        "instead)",
        path,
        what,
    )
