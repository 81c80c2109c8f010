"""Ending a trial whose training process died before its hook could.

A reader waits for a worker's end marker before it calls training over; when the process was
killed (or crashed hard), nobody writes it. The job supervisor seals the trial instead, so rules
finish the steps that were published and end.
"""

from __future__ import annotations

import os
import time

from tensortap.format import _layout as layout
from tensortap.format._documents import encode_json
from tensortap.storage import Store, open_store


def seal_trial(path: str | os.PathLike[str] | Store, reason: str) -> list[str]:
    """Write an end marker for every worker of the trial at ``path`` that has none; returns
    the workers sealed. Everything they published stays readable."""
    store = open_store(path)
    sealed = []
    for worker in store.list_dir(layout.WORKERS_PREFIX):
        if worker.startswith("."):
            continue
        try:
            layout.validate_worker_name(worker)
        except ValueError:
            continue
        try:
            store.get(layout.end_key(worker))
            continue  # ended on its own
        except KeyError:
            pass
        body = {"worker": worker, "ended": time.time(), "sealed": reason}
        store.put(layout.end_key(worker), encode_json("end", body))
        sealed.append(worker)
    return sealed
