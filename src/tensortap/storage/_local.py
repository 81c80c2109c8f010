"""A store in a local directory. Atomic publish is a unique temp name, then ``os.replace``
(:mod:`~tensortap.storage._local_writer`).

Reading serves regular files inside the root only: a symbolic link (which could point out of
the trial, or at ``/dev/zero``), a FIFO (which would block forever) or a device is refused with
a StorageError and never followed. It is listed by ``list`` (a reader that reads it then says
what is wrong with it, instead of losing it silently), never by ``list_dir`` (a directory
that is a symlink is not walked). A range is checked against the file's real
size before any memory is allocated for it. Read descriptors are kept open between reads,
within one budget for the whole process (:mod:`~tensortap.storage._descriptors`).
"""

from __future__ import annotations

import builtins
import errno
import hashlib
import os
import stat
import time
from pathlib import Path

from tensortap.exceptions import StorageError
from tensortap.storage._base import ObjectWriter, Store, StoreCapabilities, validate_key
from tensortap.storage._descriptors import (
    HANDLES,
    READ_FLAGS,
    HandleBudget,
    budget_for,
    owners,
    raise_open_file_limit,
    read_regular,
)
from tensortap.storage._local_writer import LocalWriter, is_tmp
from tensortap.storage._resolve import LOCAL_SCHEME, register_store

# Modification times are only as fine as the filesystem's clock tick (often a few ms, 2 s on
# FAT): Store.version hashes a file modified more recently than this.
_COARSE_CLOCK_NS = 3_000_000_000


class LocalStore(Store):
    """Objects are files under ``root``; published objects are immutable, so reads cache handles.

    ``fsync=True`` also survives power loss (a process crash never loses a published object
    either way, since the kernel keeps written pages). ``direct_writes`` (default) writes
    objects larger than 4 MiB past the page cache where the filesystem allows (see
    ``LocalWriter``); ``False`` keeps them in the page cache for readers that follow closely.
    """

    capabilities = StoreCapabilities(local_path=True, lists_trials=True)

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
        self._owner = next(owners)  # this store's handles in HANDLES
        self._real_root = os.path.realpath(self.root)
        self._inside: set[str] = set()  # directories checked to lie inside the root

    def local_directory(self) -> Path:
        return self.root

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*validate_key(key).split("/"))

    def _open_regular(self, key: str) -> tuple[int, int]:
        """A read descriptor of the regular file ``key`` inside the root, and its size."""
        path = self._path(key)
        self._check_inside(path.parent, key)
        try:
            fd = os.open(path, READ_FLAGS)
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
        # a replaced object must not be served from a handle of the old file: one opened before
        # the writer, or by a read while it wrote
        HANDLES.drop(self._owner, key)
        return LocalWriter(
            path, self.fsync, self.direct_writes, lambda: HANDLES.drop(self._owner, key)
        )

    def exists(self, key: str) -> bool:
        path = self._path(key)
        return path.is_file() and not path.is_symlink()

    def list(self, prefix: str = "", start_after: str | None = None) -> builtins.list[str]:
        """Every entry that is not a directory: regular files, and symlinks, FIFOs and devices,
        which are listed (never followed: a read of one raises StorageError) so that a reader
        can say what is in the place of an object rather than not see it."""
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
                    not is_tmp(entry.name)
                    and key.startswith(prefix)
                    and (start_after is None or key > start_after)
                ):
                    keys.append(key)
        keys.sort()
        return keys

    def list_dir(self, prefix: str = "") -> builtins.list[str]:
        """The names of a directory's subdirectories and regular files (never of a symlink,
        FIFO or device)."""
        return self._entries(prefix, regular=True)

    def special_entries(self, prefix: str = "") -> builtins.list[str]:
        """Symlinks, FIFOs and devices among a directory's entries (not followed)."""
        return self._entries(prefix, regular=False)

    def _entries(self, prefix: str, regular: bool) -> builtins.list[str]:
        """A directory's entries that are (``regular``) or are not directories and regular
        files, never followed; none where the directory is a symlink or absent."""
        path = self.root.joinpath(*[p for p in prefix.split("/") if p])
        try:
            if path.is_symlink():
                return []
            return sorted(
                e.name
                for e in os.scandir(path)
                if not is_tmp(e.name)
                and (e.is_dir(follow_symlinks=False) or e.is_file(follow_symlinks=False)) == regular
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
        """Close this store's read descriptors (opened again by the next read)."""
        HANDLES.drop(self._owner)

    def __del__(self) -> None:  # a fallback for a store never closed
        try:
            HANDLES.forget(self._owner)
        except Exception:
            pass


register_store(LOCAL_SCHEME, lambda location: LocalStore(location.removeprefix("file://")))

__all__ = [
    "HANDLES",
    "HandleBudget",
    "LocalStore",
    "budget_for",
    "raise_open_file_limit",
    "read_regular",
]
