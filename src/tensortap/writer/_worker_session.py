"""A writer's session of its worker in a trial, opened when the writer is made (synchronously,
so that a bad location fails at construction): the trial's marker written or checked, the
worker claimed (one writer a worker), where the earlier sessions' steps end, this session's
record and the worker's info written, and the worker live again (its end marker removed)."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

from tensortap.format import _layout as layout
from tensortap.format._documents import decode_json, encode_json, trial_marker
from tensortap.format._run_config import encode_config
from tensortap.storage._base import Store
from tensortap.writer._ownership import WorkerKeeper, next_seq
from tensortap.writer._sessions import read_history, session_record


class WorkerSession:
    """One session of ``worker`` in the trial in ``store`` (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        worker: str,
        num_workers: int,
        session: str,
        framework: str | None,
    ) -> None:
        self.store = store
        self.worker = worker
        try:
            raw = store.get(layout.TRIAL_MARKER)
        except KeyError:
            store.put(layout.TRIAL_MARKER, trial_marker())
        else:
            decode_json(raw, "tensortap-trial", f"{store.location}/{layout.TRIAL_MARKER}")
        self.info: dict[str, Any] = {
            "worker": worker,
            "num_workers": num_workers,
            "session": session,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.time(),
        }
        if framework is not None:  # which rules suit the trial (tensortap.rules.rule_configs)
            self.info["framework"] = framework
        # One writer per worker: a second one is refused before it writes anything.
        self.keeper = WorkerKeeper(store, worker, self.info)
        self._updates: dict[str, Any] = {}
        self._lock = threading.Lock()
        try:
            # where the earlier sessions' steps end (read before their end marker goes)
            self.start = read_history(store, worker)
            self.put_record()
            store.delete(layout.end_key(worker))  # a resumed worker is live again
            store.put(layout.worker_info_key(worker), encode_json("worker", self.info))
            #: the sequence number of the worker's next object
            self.first_seq = next_seq(store, worker)
        except BaseException:
            self.keeper.release()
            raise

    def put_record(self) -> None:
        """Write this session's record (again); raises StorageError."""
        key = layout.session_key(self.worker, self.start.index)
        with self._lock:
            updates = dict(self._updates)
        self.store.put(key, session_record(self.info, self.start, updates))

    def note(self, updates: dict[str, Any]) -> None:
        """Rewrite this session's record with ``updates`` (see :mod:`tensortap.writer._sessions`);
        raises StorageError."""
        with self._lock:
            self._updates.update(updates)
        self.put_record()

    def put_config(self, config: dict[str, Any]) -> None:
        """Write this session's run configuration (all of it, again: the document is replaced
        atomically); raises StorageError."""
        key = layout.config_key(self.worker, self.start.index)
        raw = encode_config(self.worker, self.info["session"], self.start.index, config)
        with self._lock:
            self.store.put(key, raw)
