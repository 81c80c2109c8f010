"""A store in a local directory. Atomic publish is a unique temp name, then ``os.replace``."""

from __future__ import annotations

import builtins
import os
import threading
import uuid
from collections import OrderedDict
from pathlib import Path

from tensortap.exceptions import StorageError
from tensortap.storage.base import ObjectWriter, Store, validate_key

_TMP_MARK = ".tmp-"
_MAX_OPEN_FILES = 64
_WRITE_BUFFER = 1 << 20


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
        self._handles: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*validate_key(key).split("/"))

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            raise KeyError(key) from None
        except OSError as exc:
            raise StorageError(f"cannot read {self._path(key)}: {exc}") from exc

    def _fd(self, key: str) -> int:
        with self._lock:
            fd = self._handles.get(key)
            if fd is not None:
                self._handles.move_to_end(key)
                return fd
        try:
            fd = os.open(self._path(key), os.O_RDONLY)
        except FileNotFoundError:
            raise KeyError(key) from None
        except OSError as exc:
            raise StorageError(f"cannot open {self._path(key)}: {exc}") from exc
        with self._lock:
            self._handles[key] = fd
            while len(self._handles) > _MAX_OPEN_FILES:
                _, old = self._handles.popitem(last=False)
                os.close(old)
        return fd

    def get_range(self, key: str, start: int, length: int) -> bytearray:
        buf = bytearray(length)
        fd = self._fd(key)
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
            fd = self._handles.pop(key, None)
            if fd is not None:
                os.close(fd)
        return _LocalWriter(path, self.fsync)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "", start_after: str | None = None) -> builtins.list[str]:
        base = self.root
        directory = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = base.joinpath(*directory.split("/")) if directory else base
        keys: list[str] = []
        if not start.is_dir():
            return keys
        for dirpath, dirnames, filenames in os.walk(start):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel = os.path.relpath(dirpath, base)
            head = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            for name in filenames:
                if _is_tmp(name):
                    continue
                key = head + name
                if key.startswith(prefix) and (start_after is None or key > start_after):
                    keys.append(key)
        keys.sort()
        return keys

    def list_dir(self, prefix: str = "") -> builtins.list[str]:
        path = self.root.joinpath(*[p for p in prefix.split("/") if p])
        try:
            return sorted(e.name for e in os.scandir(path) if not _is_tmp(e.name))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise StorageError(f"cannot list {path}: {exc}") from exc

    def delete(self, key: str) -> None:
        with self._lock:
            fd = self._handles.pop(key, None)
            if fd is not None:
                os.close(fd)
        try:
            self._path(key).unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot delete {self._path(key)}: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            for fd in self._handles.values():
                os.close(fd)
            self._handles.clear()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
