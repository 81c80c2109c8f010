"""A store in a local directory. Atomic publish is a unique temp name, then ``os.replace``.

Reading serves regular files inside the root only: a symbolic link (which could point out of
the trial, or at ``/dev/zero``), a FIFO (which would block forever) or a device is refused with
a StorageError, never followed, and is not listed. A range is checked against the file's real
size before any memory is allocated for it.
"""

from __future__ import annotations

import builtins
import errno
import hashlib
import os
import stat
import threading
import time
import uuid
from collections import OrderedDict
from pathlib import Path

from tensortap.exceptions import StorageError
from tensortap.storage.base import ObjectWriter, Store, validate_key

_TMP_MARK = ".tmp-"
_MAX_OPEN_FILES = 64
_WRITE_BUFFER = 1 << 20
# Modification times are only as fine as the filesystem's clock tick (often a few ms, 2 s on
# FAT): Store.version hashes a file modified more recently than this.
_COARSE_CLOCK_NS = 3_000_000_000
# Open for reading without following a final symlink and without blocking on a FIFO.
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def _is_tmp(name: str) -> bool:
    return name.startswith(".") and _TMP_MARK in name


class _LocalWriter(ObjectWriter):
    def __init__(self, final: Path, fsync: bool) -> None:
        self._final = final
        self._tmp = final.with_name(f".{final.name}{_TMP_MARK}{uuid.uuid4().hex}")
        self._fsync = fsync
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            # A large buffer turns many small tensor writes into few system calls.
            self._file = open(self._tmp, "wb", buffering=_WRITE_BUFFER)  # noqa: SIM115
        except OSError as exc:
            raise StorageError(f"cannot create {self._tmp}: {exc}") from exc

    def write(self, data: bytes | bytearray | memoryview) -> None:
        try:
            self._file.write(data)
        except OSError as exc:
            self.abort()
            raise StorageError(f"cannot write {self._final}: {exc}") from exc

    def commit(self) -> None:
        try:
            self._file.flush()
            if self._fsync:
                os.fsync(self._file.fileno())
            self._file.close()
            os.replace(self._tmp, self._final)
        except OSError as exc:
            self.abort()
            raise StorageError(f"cannot publish {self._final}: {exc}") from exc

    def abort(self) -> None:
        try:
            self._file.close()
        except OSError:
            pass
        try:
            self._tmp.unlink(missing_ok=True)
        except OSError:
            pass


class LocalStore(Store):
    """Objects are files under ``root``; published objects are immutable, so reads cache handles.

    ``fsync=True`` also survives power loss (a process crash never loses a published object
    either way, since the kernel keeps written pages).
    """

    def __init__(self, root: str | os.PathLike[str], fsync: bool = False) -> None:
        self.root = Path(root).expanduser().absolute()
        self.location = str(self.root)
        self.fsync = fsync
        if self.root.exists() and not self.root.is_dir():
            raise StorageError(
                f"{self.root} is a file, not a directory; give a directory path for the trial"
            )
        self._handles: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self._lock = threading.Lock()
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

    def _fd(self, key: str) -> tuple[int, int]:
        with self._lock:
            found = self._handles.get(key)
            if found is not None:
                self._handles.move_to_end(key)
                return found
        found = self._open_regular(key)
        with self._lock:
            self._handles[key] = found
            while len(self._handles) > _MAX_OPEN_FILES:
                _, (old, _size) = self._handles.popitem(last=False)
                os.close(old)
        return found

    def size(self, key: str) -> int:
        return self._fd(key)[1]

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
        fd, size = self._fd(key)
        if start < 0 or length < 0 or start + length > size:
            raise StorageError(
                f"{self._path(key)} has {size} bytes; bytes [{start}, {start + length}) were "
                "asked for: the file was truncated, or the index pointing into it is corrupt"
            )
        buf = bytearray(length)
        try:
            got = os.preadv(fd, [buf], start) if length else 0
        except OSError as exc:
            raise StorageError(f"cannot read {self._path(key)}: {exc}") from exc
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
        with self._lock:  # a replaced object must not be served from an old handle
            found = self._handles.pop(key, None)
            if found is not None:
                os.close(found[0])
        return _LocalWriter(path, self.fsync)

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
        with self._lock:
            found = self._handles.pop(key, None)
            if found is not None:
                os.close(found[0])
        try:
            self._path(key).unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot delete {self._path(key)}: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            for fd, _size in self._handles.values():
                os.close(fd)
            self._handles.clear()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
