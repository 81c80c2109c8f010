"""One writer per worker: a second process writing the same worker of a trial is refused.

Two writers on one worker would overwrite each other's segments (both count ``seq`` from the
same listing) and lose steps whose ``flush()`` returned True. So a writer *claims* its worker
before it writes anything, and a second writer gets :class:`~tensortap.exceptions.WorkerInUse`
at construction, naming the owner (pid, host, session) and what to do.

How a worker is claimed is decided by what the store declares (``store.capabilities``), never
by its class:

- On a local disk (``local_path``) the claim is an exclusive ``flock`` on
  ``workers/<worker>/.owner.lock`` (a hidden file readers ignore). The kernel drops it when the
  owner dies, even by SIGKILL, so a restarted script resumes the worker at once.
- On a store with conditional writes (``conditional_put``: S3) it is a lease object,
  ``workers/<worker>/owner.json``, created only if absent (``If-None-Match: *``) and renewed
  by the writer thread every ``check_secs`` (20 s, ``LEASE_SECS / 3``) with ``If-Match`` on its
  ETag. A lease not renewed for its
  ``lease_secs`` (``LEASE_SECS``) may be taken over (again with ``If-Match``, so two takers
  cannot both win); so may one whose owner ran on this host and is gone. "Not renewed for" is
  judged by the *server's* clock alone: the GET's ``Date`` header minus the object's
  ``Last-Modified``, both stamped by the S3 server, so a writer whose clock is wrong (by any
  amount, either way) can neither evict a live owner nor keep a dead one. No two hosts' clocks
  are ever compared; the ``expires`` in the body (the owner's own clock) is written only for
  older tensortap versions and never read. A server that sends no ``Date`` or
  ``Last-Modified`` gets its leases treated as live (the error says which object to delete).
  A writer that finds its lease taken stops publishing and says so in its status.
- A store only this process sees (``process_local``: memory) is claimed in a process-wide
  table, which is all it needs.
- Any other store cannot keep a worker to one writer: claiming one raises
  :class:`~tensortap.exceptions.InvalidConfigError` (a hook refuses to write there) rather than
  hand out a process-wide claim that a writer in another process would never see.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from tensortap.exceptions import InvalidConfigError, StorageError, TensortapError, WorkerInUse
from tensortap.format import _layout as layout
from tensortap.format._documents import encode_json, trial_marker
from tensortap.storage._base import Store

LEASE_SECS = 60.0
#: This host's wall clock, read only for what a lease shows people (and older versions):
#: never to judge a lease. A parameter so tests can run a writer with a skewed clock.
wall_clock: Callable[[], float] = time.time
_CLAIMED: set[tuple[int, str]] = set()  # (id(store), worker) claimed in this process
_CLAIMED_LOCK = threading.Lock()


def next_seq(store: Store, worker: str) -> int:
    """Where ``worker``'s segment numbers continue: after the highest of its data, index and
    collections objects (0 for a new worker)."""
    seqs = [
        layout.seq_of(k)
        for prefix in (
            layout.index_prefix(worker),
            layout.data_prefix(worker),
            layout.collections_prefix(worker),
        )
        for k in store.list(prefix)
    ]
    return max((s for s in seqs if s is not None), default=-1) + 1


def owner_key(worker: str) -> str:
    return f"{layout.worker_prefix(worker)}owner.json"


def describe_owner(info: dict[str, Any]) -> str:
    since = info.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if since else "?"
    return (
        f"pid {info.get('pid', '?')} on host {info.get('host', '?')} "
        f"(session {info.get('session', '?')}, since {when})"
    )


def _busy(store: Store, worker: str, owner: dict[str, Any], extra: str = "") -> WorkerInUse:
    return WorkerInUse(
        f"{worker} of the trial at {store.location} is being written by "
        f"{describe_owner(owner)}{extra}. Two writers on one worker would lose steps: give each "
        "process its own worker (Hook(..., worker=rank)) or its own out_dir"
    )


class Claim:
    """A held claim on one worker."""

    def renew(self) -> str | None:
        """Keep the claim; a reason when it was lost (then stop writing)."""
        return None

    def release(self) -> None:
        """Give the worker up (never raises)."""


# What a refused claim raises, given the owner's record and a note on its lease.
Busy = Callable[[dict[str, Any], str], TensortapError]


class _LocalClaim(Claim):
    def __init__(self, store: Store, prefix: str, info: dict[str, Any], busy: Busy) -> None:
        import fcntl

        folder = store.local_directory().joinpath(*prefix.strip("/").split("/"))
        path = folder / ".owner.lock"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as exc:
            raise StorageError(f"cannot create {path}: {exc}") from exc
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                owner = json.loads(os.pread(self._fd, 4096, 0) or b"{}")
            except ValueError:
                owner = {}
            os.close(self._fd)
            raise busy(owner if isinstance(owner, dict) else {}, "") from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps(info).encode(), 0)
        self._path = path

    def renew(self) -> str | None:
        try:
            same = os.stat(self._path).st_ino == os.fstat(self._fd).st_ino
        except OSError:
            same = False
        if not same:  # the folder was deleted (and maybe re-created) under the writer
            return "its lock file was deleted"
        return None

    def release(self) -> None:
        try:
            os.close(self._fd)  # drops the flock; the file stays (another may hold it next)
        except OSError:
            pass


class _LeaseClaim(Claim):
    def __init__(self, store: Store, prefix: str, info: dict[str, Any], busy: Busy) -> None:
        self._store, self._busy, self._info = store, busy, dict(info)
        self._key = f"{prefix}owner.json"
        self._etag = self._take()

    def _body(self) -> bytes:
        # "expires" (this host's clock) only for older versions, which judged by it
        body = {**self._info, "lease_secs": LEASE_SECS, "expires": wall_clock() + LEASE_SECS}
        return json.dumps(body).encode()

    def _take(self) -> str:
        store = self._store
        etag = store.put_conditional(self._key, self._body(), if_none_match=True)
        if etag is not None:
            return str(etag)
        try:
            raw, current, age = store.get_with_age(self._key)
            owner = json.loads(raw)
            if not isinstance(owner, dict):
                owner = {}
        except KeyError:  # released in between: try once more
            etag = store.put_conditional(self._key, self._body(), if_none_match=True)
            if etag is None:
                raise self._busy({}, "") from None
            return str(etag)
        except ValueError:  # an unreadable body: judged by its age alone
            owner = {}
        period = _lease_secs(owner)
        gone = owner.get("host") == socket.gethostname() and not _pid_alive(owner.get("pid"))
        stale = age is not None and age > period
        if gone or stale:
            etag = store.put_conditional(self._key, self._body(), if_match=current)
            if etag is not None:
                return str(etag)
        if age is None:
            left = (
                f"; this S3 server sends no Date/Last-Modified, so tensortap cannot tell whether "
                f"that writer is alive: if it is gone, delete {store.location}/{self._key}"
            )
        else:
            left = (
                f"; its lease was renewed {max(age, 0.0):.0f} s ago by the S3 server's clock "
                f"and may be taken over once it goes {period:.0f} s without renewal"
            )
        raise self._busy(owner, left)

    def renew(self) -> str | None:
        try:
            etag = self._store.put_conditional(self._key, self._body(), if_match=self._etag)
        except StorageError:
            return None  # a transient failure: the lease has LEASE_SECS to be renewed
        if etag is None:
            return "another writer took over its lease"
        self._etag = str(etag)
        return None

    def release(self) -> None:
        try:
            _, current = self._store.get_with_etag(self._key)
            if current == self._etag:
                self._store.delete(self._key)
        except (KeyError, StorageError):
            pass


class _ProcessClaim(Claim):
    def __init__(self, store: Store, prefix: str, busy: Busy) -> None:
        self._id = (id(store), prefix)
        with _CLAIMED_LOCK:
            if self._id in _CLAIMED:
                raise busy({"pid": os.getpid(), "host": socket.gethostname()}, "")
            _CLAIMED.add(self._id)

    def release(self) -> None:
        with _CLAIMED_LOCK:
            _CLAIMED.discard(self._id)


def _lease_secs(owner: dict[str, Any]) -> float:
    """The lease period its owner declared (``LEASE_SECS`` for a lease that declares none)."""
    period = owner.get("lease_secs")
    if isinstance(period, int | float) and not isinstance(period, bool) and 0 < period < 1e6:
        return float(period)
    return LEASE_SECS


def _pid_alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


class WorkerKeeper:
    """A writer's hold on its worker, checked every ``check_secs``: the worker is still this
    writer's, and the trial is still there (put back, and the worker claimed again, when
    ``out_dir`` was deleted or a bucket lost its data)."""

    def __init__(self, store: Store, worker: str, info: dict[str, Any]) -> None:
        self.store, self.worker, self.info = store, worker, info
        self.claim: Claim | None = claim_worker(store, worker, info)
        self.lost: str | None = None  # why the worker is no longer this writer's

    def check(self) -> str:
        """``"ok"``, ``"recreated"`` (the trial was put back: what was published before is
        lost) or ``"lost"`` (see ``lost``; stop publishing)."""
        if self.lost is not None:
            return "lost"
        if self.store.exists(layout.TRIAL_MARKER):
            reason = self.claim.renew() if self.claim is not None else None
            if reason is None:
                return "ok"
            self.lost = reason
            return "lost"
        self.release()
        try:
            self.claim = claim_worker(self.store, self.worker, self.info)
        except TensortapError as exc:
            self.lost = f"it could not claim the re-created worker again ({exc})"
            return "lost"
        self.store.put(layout.TRIAL_MARKER, trial_marker())
        self.store.put(layout.worker_info_key(self.worker), encode_json("worker", self.info))
        return "recreated"

    def release(self) -> None:
        if self.claim is not None:
            self.claim.release()
            self.claim = None


def claim_worker(store: Store, worker: str, info: dict[str, Any]) -> Claim:
    """Claim ``worker`` for this writer, or raise WorkerInUse naming its owner."""
    return claim_prefix(
        store,
        layout.worker_prefix(worker),
        info,
        lambda owner, extra: _busy(store, worker, owner, extra),
    )


def claim_prefix(store: Store, prefix: str, info: dict[str, Any], busy: Busy) -> Claim:
    """Claim the folder ``prefix`` (``a/b/``) of ``store`` for one process at a time: a
    ``.owner.lock`` flock on local disk, an ``owner.json`` lease where the store has
    conditional writes, a process-wide table for a store only this process sees; raise
    ``busy(owner, note)`` when another holds it, and InvalidConfigError for a store that can do
    none of these. Writers claim their worker with it, exporters their run."""
    capabilities = store.capabilities
    if capabilities.local_path:
        return _LocalClaim(store, prefix, info, busy)
    if capabilities.conditional_put:
        return _LeaseClaim(store, prefix, info, busy)
    if capabilities.process_local:
        return _ProcessClaim(store, prefix, busy)
    raise InvalidConfigError(
        f"{store!r} cannot keep {prefix.rstrip('/')} to one writer: its capabilities declare "
        "neither a local directory (a file lock), conditional writes (a lease) nor objects seen "
        "by this process only, and two writers there would lose each other's steps. Write to "
        "a local directory or to a store with conditional writes (S3), or declare the one "
        "the backend has in its StoreCapabilities"
    )
