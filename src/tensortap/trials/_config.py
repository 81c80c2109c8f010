"""A trial's run configuration, as :meth:`Trial.config` reads it: each session's configuration
document (:mod:`tensortap.format._run_config`), merged in session order."""

from __future__ import annotations

from typing import Any

from tensortap.exceptions import FormatError, StorageError
from tensortap.format import _layout as layout
from tensortap.format._run_config import decode_config, merge
from tensortap.trials._index import TrialIndex


def session_configs(index: TrialIndex, worker: str) -> dict[int, dict[str, Any]]:
    """The configuration each session of ``worker`` recorded, by session index; a damaged
    document is a problem of the trial (raised when it is strict), and left out. Read afresh
    each time: a live session rewrites its document as it learns more."""
    out: dict[int, dict[str, Any]] = {}
    try:
        keys = [k for k in index.store.list(layout.config_prefix(worker)) if k.endswith(".json")]
    except StorageError as exc:
        index.problem(f"configuration of {worker}", exc)
        return out
    for key in keys:
        try:
            doc = decode_config(index.store.get(key), f"configuration {key}")
        except KeyError:
            continue  # deleted while listed
        except (FormatError, StorageError) as exc:
            index.problem(key, exc)
            continue
        out[int(doc["index"])] = doc["config"]
    return out


def worker_config(index: TrialIndex, worker: str) -> dict[str, Any]:
    """``worker``'s configuration: its sessions' merged, a later session's values first."""
    merged: dict[str, Any] = {}
    for _, config in sorted(session_configs(index, worker).items()):
        merge(merged, config)
    return merged
