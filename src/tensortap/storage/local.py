"""A store in a local directory. Atomic publish is a unique temp name, then ``os.replace``.

Reading serves regular files inside the root only: a symbolic link (which could point out of
the trial, or at ``/dev/zero``), a FIFO (which would block forever) or a device is refused with
a StorageError, never followed, and is not listed. A range is checked against the file's real
size before any memory is allocated for it.

Read descriptors are kept open between reads, within one budget for the whole process
(:data:`HANDLES`): however many stores and trials are open (a dashboard over 200 runs, rules
over many trials), the least recently used descriptor is closed first, so that opening more
trials never runs the process out of file descriptors. A descriptor being read from is never
closed under its reader.
"""

from __future__ import annotations

import builtins
import errno
import hashlib
import itertools
import mmap
import os
import stat
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tensortap.exceptions import StorageError
from tensortap.storage.base import ObjectWriter, Store, validate_key

_TMP_MARK = ".tmp-"
_WRITE_BUFFER = 1 << 20
# Modification times are only as fine as the filesystem's clock tick (often a few ms, 2 s on
# FAT): Store.version hashes a file modified more recently than this.
_COARSE_CLOCK_NS = 3_000_000_000
# Open for reading without following a final symlink and without blocking on a FIFO.
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def _is_tmp(name: str) -> bool:
    return name.startswith(".") and _TMP_MARK in name


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
_owners = itertools.count()


def read_regular(
    path: str | os.PathLike[str],
    inside: str | os.PathLike[str],
    limit: int,
    offset: int = 0,
    tail: bool = False,
) -> bytes:
    """At most ``limit`` bytes of the regular file ``path`` (from ``offset``, or its last
    ``limit`` bytes with ``tail``), opened as a trial's files are: it must lie inside the
    directory ``inside`` (no symbolic link on the way leads out), is not followed when it is a
    symlink itself, and is refused when it is a FIFO, a device or a directory (opened without
    blocking, so a FIFO never hangs the reader). A missing file raises FileNotFoundError; a
    refused one a StorageError (an OSError too)."""
    path = Path(path)
    root = os.path.realpath(inside)
    parent = os.path.realpath(path.parent)
    if parent != root and not parent.startswith(root + os.sep):
        raise StorageError(
            f"{path} leads out of {inside} through a symbolic link (to {parent}); not followed"
        )
    try:
        fd = os.open(path, _READ_FLAGS)
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
        start = max(0, info.st_size - limit) if tail else offset
        length = max(0, min(limit, info.st_size - start))
        return os.pread(fd, length, start) if length else b""
    except StorageError:
        raise
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    finally:
        os.close(fd)


_O_DIRECT = getattr(os, "O_DIRECT", 0)  # Linux
_DIRECT_BLOCK = 4 << 20  # staging size: a multiple of any block size O_DIRECT asks for
_DIRECT_ALIGN = 4096
_stages: list[mmap.mmap] = []  # page-aligned staging buffers, reused between objects
_stages_lock = threading.Lock()


class _LocalWriter(ObjectWriter):
    """Streams an object to a temp file, renamed into place by ``commit``.

    With ``direct``, an object larger than the 4 MiB staging buffer is written with
    ``O_DIRECT``, past the page cache: each new page-cache page of a large write costs the
    writer kernel time (0.5 to 1.4 ms per MB on a virtual machine, against 0.04 ms per MB
    direct), and a writer saving every tensor every step writes tens of MB per step. Smaller
    objects, and filesystems that refuse ``O_DIRECT`` (tmpfs), are written through the page
    cache as before. The trade: a reader of a just-written large segment reads it from disk.
    """

    def __init__(self, final: Path, fsync: bool, direct: bool = False) -> None:
        self._final = final
        self._tmp = final.with_name(f".{final.name}{_TMP_MARK}{uuid.uuid4().hex}")
        self._fsync = fsync
        self._stage: mmap.mmap | None = None  # while direct writes are possible
        self._staged = 0
        self._direct_fd: int | None = None
        self._direct_size = 0
        self._went_direct = False
        self._may_go_direct = direct and bool(_O_DIRECT)
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            # A large buffer turns many small tensor writes into few system calls.
            self._file = open(self._tmp, "wb", buffering=_WRITE_BUFFER)  # noqa: SIM115
        except OSError as exc:
            raise StorageError(f"cannot create {self._tmp}: {exc}") from exc

    @property
    def direct(self) -> bool:
        """Whether this object's bytes went past the page cache (``O_DIRECT``)."""
        return self._went_direct

    def write(self, data: bytes | bytearray | memoryview) -> None:
        try:
            if not self._may_go_direct:
                self._file.write(data)
                return
            view = memoryview(data).cast("B")
            while len(view):
                stage = self._take_stage()
                n = min(_DIRECT_BLOCK - self._staged, len(view))
                stage[self._staged : self._staged + n] = view[:n]
                self._staged += n
                view = view[n:]
                if self._staged == _DIRECT_BLOCK:
                    self._write_stage()
        except OSError as exc:
            self.abort()
            raise StorageError(f"cannot write {self._final}: {exc}") from exc

    def _take_stage(self) -> mmap.mmap:
        if self._stage is None:
            with _stages_lock:
                self._stage = _stages.pop() if _stages else None
            if self._stage is None:
                self._stage = mmap.mmap(-1, _DIRECT_BLOCK)
        return self._stage

    def _give_back_stage(self) -> None:
        stage, self._stage = self._stage, None
        if stage is not None:
            with _stages_lock:
                if len(_stages) < 4:
                    _stages.append(stage)
                    return
            stage.close()

    def _write_stage(self) -> None:
        """Write the full staging buffer directly (or, where the filesystem refuses O_DIRECT
        on the first try, through the page cache from then on)."""
        stage = self._stage
        assert stage is not None
        if self._direct_fd is None:
            try:
                self._direct_fd = os.open(self._tmp, os.O_WRONLY | _O_DIRECT)
                self._write_direct(memoryview(stage)[: self._staged])
                self._went_direct = True
            except OSError:  # e.g. tmpfs or FUSE: EINVAL at the open or the first write
                fd, self._direct_fd, self._direct_size = self._direct_fd, None, 0
                if fd is not None:
                    os.close(fd)
                self._may_go_direct = False
                self._file.write(memoryview(stage)[: self._staged])
                self._give_back_stage()
            self._staged = 0
            return
        self._write_direct(memoryview(stage)[: self._staged])
        self._staged = 0

    def _write_direct(self, view: memoryview) -> None:
        assert self._direct_fd is not None
        while len(view):
            n = os.pwrite(self._direct_fd, view, self._direct_size)
            if n <= 0 or (n % _DIRECT_ALIGN and n != len(view)):
                raise OSError(errno.EIO, f"short direct write ({n} of {len(view)} bytes)")
            self._direct_size += n
            view = view[n:]

    def _finish_direct(self) -> None:
        """The last, partial block: written padded to the alignment, then the file is cut to
        its real size."""
        assert self._direct_fd is not None
        assert self._stage is not None
        size = self._direct_size + self._staged
        padded = -(-self._staged // _DIRECT_ALIGN) * _DIRECT_ALIGN
        if padded:
            self._write_direct(memoryview(self._stage)[:padded])
        os.ftruncate(self._direct_fd, size)
        self._direct_size = size
        self._staged = 0

    def commit(self) -> None:
        try:
            if self._direct_fd is not None:
                self._finish_direct()
                if self._fsync:
                    os.fsync(self._direct_fd)
            else:
                if self._staged:  # small: never went direct
                    assert self._stage is not None
                    self._file.write(memoryview(self._stage)[: self._staged])
                    self._staged = 0
                self._file.flush()
                if self._fsync:
                    os.fsync(self._file.fileno())
            self._close_files()
            os.replace(self._tmp, self._final)
        except OSError as exc:
            self.abort()
            raise StorageError(f"cannot publish {self._final}: {exc}") from exc

    def _close_files(self) -> None:
        self._give_back_stage()
        fd, self._direct_fd = self._direct_fd, None
        if fd is not None:
            os.close(fd)
        self._file.close()

    def abort(self) -> None:
        try:
            self._close_files()
        except OSError:
            pass
        try:
            self._tmp.unlink(missing_ok=True)
        except OSError:
            pass


class LocalStore(Store):
    """Objects are files under ``root``; published objects are immutable, so reads cache handles.

    ``fsync=True`` also survives power loss (a process crash never loses a published object
    either way, since the kernel keeps written pages). ``direct_writes`` (default) writes
    objects larger than 4 MiB past the page cache where the filesystem allows (see
    ``_LocalWriter``); ``False`` keeps them in the page cache for readers that follow closely.
    """

    def __init__(
        self, root: str | os.PathLike[str], fsync: bool = False, direct_writes: bool = True
    ) -> None:
        self.root = Path(root).expanduser().absolute()
        self.location = str(self.root)
        self.fsync = fsync
        self.direct_writes = direct_writes
        if self.root.exists() and not self.root.is_dir():
            raise StorageError(
                f"{self.root} is a file, not a directory; give a directory path for the trial"
            )
        self._owner = next(_owners)  # this store's handles in HANDLES
        self._real_root = os.path.realpath(self.root)
        self._inside: set[str] = set()  # directories checked to lie inside the root

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*validate_key(key).split("/"))

    def _open_regular(self, key: str) -> tuple[int, int]:
        """A read descriptor of the regular file ``key`` inside the root, and its size."""
        path = self._path(key)
        self._check_inside(path.parent, key)
        try:
            fd = os.open(path, _READ_FLAGS)
        except FileNotFoundError:
            raise KeyError(key) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StorageError(
                    f"{path} is a symbolic link; a trial holds regular files only (not followed)"
                ) from None
            raise StorageError(f"cannot open {path}: {exc}") from exc
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise StorageError(
                f"{path} is not a regular file (a FIFO, device or directory); a trial holds "
                "regular files only"
            )
        return fd, info.st_size

    def _check_inside(self, directory: Path, key: str) -> None:
        """A directory on the way to a key must not lead out of the root through a symlink."""
        text = str(directory)
        if text in self._inside:
            return
        real = os.path.realpath(directory)
        if real != self._real_root and not real.startswith(self._real_root + os.sep):
            raise StorageError(
                f"{key} leads out of the trial at {self.root} through a symbolic link "
                f"(to {real}); not followed"
            )
        self._inside.add(text)

    def get(self, key: str) -> bytes:
        fd, size = self._open_regular(key)
        try:
            data = os.pread(fd, size, 0) if size else b""
        except OSError as exc:
            raise StorageError(f"cannot read {self._path(key)}: {exc}") from exc
        finally:
            os.close(fd)
        if len(data) != size:
            raise StorageError(f"{self._path(key)} changed while it was read")
        return data

    def size(self, key: str) -> int:
        handle = HANDLES.acquire(self._owner, key, lambda: self._open_regular(key))
        HANDLES.release(handle)
        return handle.size

    def version(self, key: str) -> str:
        """Size, modification time (ns), inode and device of the regular file (not followed)."""
        path = self._path(key)
        self._check_inside(path.parent, key)
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            raise KeyError(key) from None
        except OSError as exc:
            raise StorageError(f"cannot look at {path}: {exc}") from exc
        version = f"{found.st_size}:{found.st_mtime_ns}:{found.st_ino}:{found.st_dev}"
        if time.time_ns() - found.st_mtime_ns < _COARSE_CLOCK_NS and stat.S_ISREG(found.st_mode):
            # a file changed this recently may change again within one tick of the filesystem's
            # clock, keeping its modification time: its bytes are hashed too
            version += ":" + hashlib.sha256(self.get(key)).hexdigest()
        return version

    def get_range(self, key: str, start: int, length: int) -> bytearray:
        handle = HANDLES.acquire(self._owner, key, lambda: self._open_regular(key))
        try:
            size = handle.size
            if start < 0 or length < 0 or start + length > size:
                raise StorageError(
                    f"{self._path(key)} has {size} bytes; bytes [{start}, {start + length}) "
                    "were asked for: the file was truncated, or the index pointing into it is "
                    "corrupt"
                )
            buf = bytearray(length)
            try:
                got = os.preadv(handle.fd, [buf], start) if length else 0
            except OSError as exc:
                raise StorageError(f"cannot read {self._path(key)}: {exc}") from exc
        finally:
            HANDLES.release(handle)
        if got != length:
            raise StorageError(
                f"{self._path(key)} is shorter than expected ({start + got} < {start + length}); "
                "the file was truncated or is corrupt"
            )
        return buf

    def put(self, key: str, data: bytes) -> None:
        writer = self.open_writer(key)
        writer.write(data)
        writer.commit()

    def open_writer(self, key: str) -> ObjectWriter:
        path = self._path(key)
        HANDLES.drop(self._owner, key)  # a replaced object must not be served from an old handle
        return _LocalWriter(path, self.fsync, self.direct_writes)

    def exists(self, key: str) -> bool:
        path = self._path(key)
        return path.is_file() and not path.is_symlink()

    def list(self, prefix: str = "", start_after: str | None = None) -> builtins.list[str]:
        """Regular files only: symlinks, FIFOs and devices are not part of a trial."""
        directory = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self.root.joinpath(*directory.split("/")) if directory else self.root
        keys: list[str] = []
        if not start.is_dir() or start.is_symlink():
            return keys
        self._check_inside(start, prefix)
        pending = [(str(start), f"{directory}/" if directory else "")]
        while pending:
            path, head = pending.pop()
            try:
                entries = list(os.scandir(path))
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                raise StorageError(f"cannot list {path}: {exc}") from exc
            for entry in entries:
                key = head + entry.name
                if entry.is_dir(follow_symlinks=False):
                    if entry.name.startswith("."):
                        continue
                    if prefix.startswith(key + "/") or key.startswith(prefix):
                        pending.append((entry.path, key + "/"))
                elif (
                    entry.is_file(follow_symlinks=False)
                    and not _is_tmp(entry.name)
                    and key.startswith(prefix)
                    and (start_after is None or key > start_after)
                ):
                    keys.append(key)
        keys.sort()
        return keys

    def list_dir(self, prefix: str = "") -> builtins.list[str]:
        """The names of a directory's subdirectories and regular files (never of a symlink,
        FIFO or device)."""
        path = self.root.joinpath(*[p for p in prefix.split("/") if p])
        try:
            if path.is_symlink():
                return []
            return sorted(
                e.name
                for e in os.scandir(path)
                if not _is_tmp(e.name)
                and (e.is_dir(follow_symlinks=False) or e.is_file(follow_symlinks=False))
            )
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise StorageError(f"cannot list {path}: {exc}") from exc

    def delete(self, key: str) -> None:
        HANDLES.drop(self._owner, key)
        try:
            self._path(key).unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot delete {self._path(key)}: {exc}") from exc

    def close(self) -> None:
        HANDLES.drop(self._owner)

    def __del__(self) -> None:
        try:
            HANDLES.forget(self._owner)
        except Exception:
            pass
