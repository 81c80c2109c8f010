"""An in-memory store, for tests and for trials that never need to touch disk."""

from __future__ import annotations

import builtins
import threading

from tensortap.exceptions import StorageError
from tensortap.storage._base import ObjectWriter, Store, StoreCapabilities, validate_key
from tensortap.storage._resolve import register_store

_NAMED: dict[str, MemoryStore] = {}
_NAMED_LOCK = threading.Lock()


class _MemoryWriter(ObjectWriter):
    def __init__(self, store: MemoryStore, key: str) -> None:
        self._store, self._key, self._parts = store, key, bytearray()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._parts += data

    def commit(self) -> None:
        self._store.put(self._key, bytes(self._parts))

    def abort(self) -> None:
        self._parts = bytearray()


class MemoryStore(Store):
    """A dict of key -> bytes behind a lock, seen by this process only."""

    capabilities = StoreCapabilities(lists_trials=True, process_local=True)

    def __init__(self, name: str = "") -> None:
        self.location = f"memory://{name}"
        self._objects: dict[str, bytes] = {}
        self._lock = threading.Lock()

    @classmethod
    def named(cls, name: str) -> MemoryStore:
        """The process-wide store of this name (so ``memory://x`` means the same store twice)."""
        with _NAMED_LOCK:
            if name not in _NAMED:
                _NAMED[name] = cls(name)
            return _NAMED[name]

    def get(self, key: str) -> bytes:
        with self._lock:
            return self._objects[validate_key(key)]

    def size(self, key: str) -> int:
        return len(self.get(key))

    def get_range(self, key: str, start: int, length: int) -> bytearray:
        data = self.get(key)
        if start < 0 or length < 0 or start + length > len(data):
            raise StorageError(
                f"{key} has {len(data)} bytes; bytes [{start}, {start + length}) were asked for"
            )
        return bytearray(data[start : start + length])

    def put(self, key: str, data: bytes) -> None:
        with self._lock:
            self._objects[validate_key(key)] = bytes(data)

    def open_writer(self, key: str) -> ObjectWriter:
        return _MemoryWriter(self, validate_key(key))

    def exists(self, key: str) -> bool:
        with self._lock:
            return key in self._objects

    def list(self, prefix: str = "", start_after: str | None = None) -> builtins.list[str]:
        with self._lock:
            keys = [k for k in self._objects if k.startswith(prefix)]
        return sorted(k for k in keys if start_after is None or k > start_after)

    def list_dir(self, prefix: str = "") -> builtins.list[str]:
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        with self._lock:
            children = {
                k[len(prefix) :].split("/", 1)[0] for k in self._objects if k.startswith(prefix)
            }
        return sorted(children)

    def delete(self, key: str) -> None:
        with self._lock:
            self._objects.pop(key, None)


register_store("memory", lambda url: MemoryStore.named(url[len("memory://") :]))
