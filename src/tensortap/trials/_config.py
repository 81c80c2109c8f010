"""A trial's run configuration, as :meth:`Trial.config` (and the dashboard) read it: each
session's configuration document (:mod:`tensortap.format._run_config`), merged in session
order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tensortap.exceptions import FormatError, StorageError
from tensortap.format import _layout as layout
from tensortap.format._run_config import decode_config, merge
from tensortap.storage._base import Store

#: Told of a part that cannot be read: its key (or what it is) and why.
Problem = Callable[[str, BaseException], None]


def session_configs(store: Store, worker: str, problem: Problem) -> dict[int, dict[str, Any]]:
    """The configuration each session of ``worker`` recorded, by session index; a damaged
    document goes to ``problem`` (which may raise) and is left out. Read afresh each time: a
    live session rewrites its document as it learns more."""
    out: dict[int, dict[str, Any]] = {}
    try:
        keys = [k for k in store.list(layout.config_prefix(worker)) if k.endswith(".json")]
    except StorageError as exc:
        problem(f"configuration of {worker}", exc)
        return out
    for key in keys:
        try:
            doc = decode_config(store.get(key), f"configuration {key}")
        except KeyError:
            continue  # deleted while listed
        except (FormatError, StorageError) as exc:
            problem(key, exc)
            continue
        out[int(doc["index"])] = doc["config"]
    return out


def worker_config(store: Store, worker: str, problem: Problem) -> dict[str, Any]:
    """``worker``'s configuration: its sessions' merged, a later session's values first."""
    merged: dict[str, Any] = {}
    for _, config in sorted(session_configs(store, worker, problem).items()):
        merge(merged, config)
    return merged


def first_config(store: Store, workers: list[str], problem: Problem) -> dict[str, Any]:
    """The configuration of the first of ``workers`` (in order) that recorded one."""
    for name in workers:
        found = worker_config(store, name, problem)
        if found:
            return found
    return {}
