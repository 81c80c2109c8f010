"""A storage backend added the way a new one is: one module, a Store subclass and one
``register_store`` call, for ``mem://name`` locations (objects in a dict of this process).

Importing it registers the scheme. It is not tensortap's MemoryStore: it is written from the
Store contract alone, to show that the contract and the shipped conformance suite are enough.
"""

from __future__ import annotations

import builtins
import threading

from tensortap.exceptions import StorageError
from tensortap.storage import ObjectWriter, Store, StoreCapabilities, register_store, validate_key

SCHEME = "mem"
_STORES: dict[str, DictStore] = {}
_STORES_LOCK = threading.Lock()


class _Writer(ObjectWriter):
    def __init__(self, store: DictStore, key: str) -> None:
        self._store, self._key, self._data = store, key, bytearray()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._data += data

    def commit(self) -> None:
        self._store.put(self._key, bytes(self._data))

    def abort(self) -> None:
        self._data = bytearray()


class DictStore(Store):
    """Objects in a dict; only this process sees them, so a process-wide claim is enough."""

    capabilities = StoreCapabilities(lists_trials=True, process_local=True)

    def __init__(self, name: str) -> None:
        self.location = f"{SCHEME}://{name}"
        self._objects: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self.closed = 0  # how many times close() was called

    @classmethod
    def open(cls, url: str) -> DictStore:
        """The store a ``mem://name`` URL names (the same one each time in a process)."""
        name = url[len(f"{SCHEME}://") :]
        with _STORES_LOCK:
            if name not in _STORES:
                _STORES[name] = cls(name)
            return _STORES[name]

    def get(self, key: str) -> bytes:
        with self._lock:
            return self._objects[validate_key(key)]

    def get_range(self, key: str, start: int, length: int) -> bytearray:
        data = self.get(key)
        if start < 0 or length < 0 or start + length > len(data):
            raise StorageError(f"{key}: bytes [{start}, {start + length}) of {len(data)}")
        return bytearray(data[start : start + length])

    def put(self, key: str, data: bytes) -> None:
        with self._lock:
            self._objects[validate_key(key)] = bytes(data)

    def open_writer(self, key: str) -> ObjectWriter:
        return _Writer(self, validate_key(key))

    def exists(self, key: str) -> bool:
        with self._lock:
            return key in self._objects

    def list(self, prefix: str = "", start_after: str | None = None) -> builtins.list[str]:
        with self._lock:
            keys = [k for k in self._objects if k.startswith(prefix)]
        return sorted(k for k in keys if start_after is None or k > start_after)

    def list_dir(self, prefix: str = "") -> builtins.list[str]:
        head = prefix if not prefix or prefix.endswith("/") else prefix + "/"
        with self._lock:
            return sorted(
                {k[len(head) :].split("/")[0] for k in self._objects if k.startswith(head)}
            )

    def delete(self, key: str) -> None:
        with self._lock:
            self._objects.pop(key, None)

    def close(self) -> None:
        self.closed += 1


register_store(SCHEME, DictStore.open)
