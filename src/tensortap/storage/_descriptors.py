"""Read descriptors of local trials: one budget for the whole process, and opening a file the
way a trial's files are opened (a regular file inside its directory, never a symlink or FIFO).

Read descriptors are kept open between reads, within one budget for the whole process
(:data:`HANDLES`): however many stores and trials are open (a dashboard over 200 runs, rules
over many trials), the least recently used descriptor is closed first, so that opening more
trials never runs the process out of file descriptors. A descriptor being read from is never
closed under its reader.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tensortap.exceptions import StorageError

# Open for reading without following a final symlink and without blocking on a FIFO.
READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def _soft_open_file_limit() -> int | None:
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def budget_for(limit: int | None) -> int:
    """Descriptors kept open for reading under a soft limit of ``limit`` open files: a quarter
    of it (sockets, logs and the writer need the rest), between 8 and 1,024."""
    return 256 if limit is None else max(8, min(1024, limit // 4))


def raise_open_file_limit() -> int | None:
    """Raise this process's soft ``RLIMIT_NOFILE`` toward its hard limit (at most 65,536) and
    grow :data:`HANDLES` to match; the soft limit now (None where there is none to read)."""
    try:
        import resource
    except ImportError:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (OSError, ValueError):  # refused (macOS caps at OPEN_MAX): keep what we have
            pass
    HANDLES.capacity = budget_for(_soft_open_file_limit())
    return _soft_open_file_limit()


@dataclass
class _Handle:
    fd: int
    size: int
    readers: int = 0
    dropped: bool = False  # evicted or dropped while read: closed by its last reader


class HandleBudget:
    """The read descriptors open in this process, for every LocalStore: at most ``capacity``
    kept between reads, the least recently used closed first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._open: OrderedDict[tuple[int, str], _Handle] = OrderedDict()
        self._lock = threading.Lock()
        self._forgotten: deque[int] = deque()  # owners collected by the GC: closed later

    def forget(self, owner: int) -> None:
        """Close ``owner``'s handles at the next use of the budget: safe from ``__del__``,
        which the garbage collector may run while this thread holds the lock."""
        self._forgotten.append(owner)

    def __len__(self) -> int:
        return len(self._open)

    def acquire(self, owner: int, key: str, opener: Callable[[], tuple[int, int]]) -> _Handle:
        """The open handle of ``(owner, key)``, opened with ``opener`` when there is none; the
        caller reads from it and then calls :meth:`release`."""
        with self._lock:
            found = self._open.get((owner, key))
            if found is not None:
                self._open.move_to_end((owner, key))
                found.readers += 1
                return found
        fd, size = opener()
        made = _Handle(fd, size, readers=1)
        while self._forgotten:
            self.drop(self._forgotten.popleft())
        with self._lock:
            raced = self._open.get((owner, key))
            if raced is not None:  # another thread opened it meanwhile: use theirs
                raced.readers += 1
                os.close(fd)
                return raced
            self._open[(owner, key)] = made
            self._shrink()
        return made

    def release(self, handle: _Handle) -> None:
        with self._lock:
            handle.readers -= 1
            if handle.dropped and handle.readers == 0:
                os.close(handle.fd)

    def drop(self, owner: int, key: str | None = None) -> None:
        """Close ``owner``'s handle of ``key`` (a replaced or deleted object), or all of
        ``owner``'s (a closed store)."""
        with self._lock:
            keys = [k for k in self._open if k[0] == owner] if key is None else [(owner, key)]
            for k in keys:
                found = self._open.pop(k, None)
                if found is not None:
                    self._close(found)

    def _shrink(self) -> None:
        while len(self._open) > self.capacity:
            _, old = self._open.popitem(last=False)
            self._close(old)

    @staticmethod
    def _close(handle: _Handle) -> None:
        if handle.readers:
            handle.dropped = True
        else:
            os.close(handle.fd)


#: The one budget of open read descriptors shared by every LocalStore in the process.
HANDLES = HandleBudget(budget_for(_soft_open_file_limit()))
#: Numbers the stores sharing :data:`HANDLES` (each store's handles are its own).
owners = itertools.count()


def read_regular(
    path: str | os.PathLike[str],
    inside: str | os.PathLike[str],
    limit: int,
    offset: int = 0,
    tail: bool = False,
    single_link: bool = False,
) -> bytes:
    """At most ``limit`` bytes of the regular file ``path`` (from ``offset``, or its last
    ``limit`` bytes with ``tail``), opened as a trial's files are: it must lie inside the
    directory ``inside`` (no symbolic link on the way leads out), is not followed when it is a
    symlink itself, and is refused when it is a FIFO, a device or a directory (opened without
    blocking, so a FIFO never hangs the reader). With ``single_link``, a file with more than
    one hard link is refused too (a hard link to a file elsewhere is not the directory's own).
    A missing file raises FileNotFoundError; a refused one a StorageError (an OSError too)."""
    path = Path(path)
    root = os.path.realpath(inside)
    parent = os.path.realpath(path.parent)
    if parent != root and not parent.startswith(root + os.sep):
        raise StorageError(
            f"{path} leads out of {inside} through a symbolic link (to {parent}); not followed"
        )
    try:
        fd = os.open(path, READ_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StorageError(
                f"{path} is a symbolic link; only regular files inside {inside} are read "
                "(not followed)"
            ) from None
        if isinstance(exc, FileNotFoundError):
            raise
        raise StorageError(f"cannot open {path}: {exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StorageError(
                f"{path} is not a regular file (a FIFO, device or directory); only regular "
                f"files inside {inside} are read"
            )
        if single_link and info.st_nlink > 1:
            raise StorageError(
                f"{path} has {info.st_nlink} hard links: it may be a file from elsewhere, "
                f"linked into {inside}; only files with one link are read there"
            )
        start = max(0, info.st_size - limit) if tail else offset
        length = max(0, min(limit, info.st_size - start))
        return os.pread(fd, length, start) if length else b""
    except StorageError:
        raise
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    finally:
        os.close(fd)
