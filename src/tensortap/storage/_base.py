"""The storage interface every backend implements.

Contract:

- Keys are relative, '/'-separated, non-empty paths without '.', '..' or empty components
  (:func:`validate_key`). Backends never touch anything outside their root.
- ``put`` and ``open_writer(...).commit()`` are atomic: a reader sees either nothing or the
  whole object, never part of it. Published objects are never modified in place.
- ``list(prefix, start_after)`` returns every key under ``prefix`` (recursively), sorted, that
  sorts after ``start_after``. Keys being written (not yet committed) are never listed.
- ``list_dir(prefix)`` returns the names of the immediate children of a "directory" prefix
  (where directories are real, as on local disk, one left empty by a deleted or unfinished
  object may be named too).
- Where a place can hold what is not an object (local disk: a symlink, a FIFO, a device),
  ``list`` names it (its reads raise StorageError; it is never followed) and
  ``special_entries(prefix)`` names such immediate children of a directory prefix, so a
  reader can say what stands in an object's or a folder's place (empty by default).
- ``get`` / ``get_range`` raise :class:`KeyError` for a missing key and
  :class:`~tensortap.exceptions.StorageError` for any other failure.
- ``get_many`` and ``get_ranges`` read many objects or ranges at once; remote backends fetch
  them in parallel.
- A range is never trusted: a backend checks it against the object's real size (``size``)
  before allocating or requesting more than one request's worth (an index may be corrupt).
- ``close`` releases what the store holds open (descriptors, a thread pool); the store stays
  usable and opens them again when next used. A store is a context manager that closes it.
- What a backend can do beyond this is declared in its :class:`StoreCapabilities`; callers ask
  ``store.capabilities``, never the store's class.

A backend is one module: a Store subclass, and one :func:`~tensortap.storage.register_store`
call for its URL scheme. :mod:`tensortap.testing._store_conformance` checks it keeps this
contract.
"""

from __future__ import annotations

import builtins
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, TypeVar

from tensortap.exceptions import StorageError

_S = TypeVar("_S", bound="Store")


def validate_key(key: str) -> str:
    if not isinstance(key, str) or not key or key.startswith("/") or "\\" in key or "\0" in key:
        raise StorageError(f"invalid storage key {key!r}")
    parts = key.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise StorageError(f"invalid storage key {key!r}: empty, '.' or '..' components")
    return key


@dataclass(frozen=True)
class StoreCapabilities:
    """What a backend can do beyond the interface every store has (all off by default).

    - ``conditional_put``: :meth:`Store.put_conditional`, :meth:`Store.get_with_etag` and
      :meth:`Store.get_with_age` work, so a lease object can keep a worker to one writer across
      processes and hosts (S3).
    - ``local_path``: the objects are files under :meth:`Store.local_directory`, so a worker is
      claimed with a file lock there and TensorBoard files can go beside the trial (a local
      directory).
    - ``lists_trials``: :meth:`Store.list_dir` is cheap enough to look for trials under a prefix,
      so a dashboard can be pointed at one (every backend here).
    - ``process_local``: only this process can see the objects (memory), so a claim in a
      process-wide table is enough to keep a worker to one writer.

    A store with none of ``local_path``, ``conditional_put`` and ``process_local`` cannot keep a
    worker to one writer, and a hook refuses to write to it (``InvalidConfigError``) rather than
    let two writers lose each other's steps.
    """

    conditional_put: bool = False
    local_path: bool = False
    lists_trials: bool = False
    process_local: bool = False


class ObjectWriter(ABC):
    """A streaming write of one object, published atomically by ``commit``."""

    @abstractmethod
    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Append ``data``; it must not be kept after returning (the hook reuses its memory)."""

    @abstractmethod
    def commit(self) -> None:
        """Publish the object under its key (atomically)."""

    @abstractmethod
    def abort(self) -> None:
        """Discard what was written; never raises."""


class Store(ABC):
    """A flat key -> bytes store (local directory, memory, object storage)."""

    #: A human-readable location, e.g. the directory path or URL.
    location: str = ""
    #: How many bytes of recently read values a trial keeps to avoid reading them twice
    #: (worth it where a read is a network round trip, not for a local file).
    cache_bytes: int = 0
    #: How often (seconds) a live trial re-lists by default (see ``Trial.refresh_interval``).
    refresh_interval: float = 0.0
    #: What this backend can do beyond the interface (see :class:`StoreCapabilities`).
    capabilities: ClassVar[StoreCapabilities] = StoreCapabilities()

    @abstractmethod
    def get(self, key: str) -> bytes: ...

    @abstractmethod
    def get_range(self, key: str, start: int, length: int) -> bytearray:
        """``length`` bytes of an object from ``start`` (a writable buffer)."""

    def size(self, key: str) -> int:
        """The object's size in bytes (KeyError if missing)."""
        return len(self.get(key))

    def version(self, key: str) -> str:
        """What changes whenever the object's content does (size and modification time, an
        ETag, or here a hash of the bytes); KeyError if missing. Keys caches of derived data."""
        data = self.get(key)
        return f"{len(data)}:{hashlib.sha256(data).hexdigest()}"

    def get_many(self, keys: Sequence[str]) -> builtins.list[bytes]:
        """Several whole objects, in order (one after another here)."""
        return [self.get(key) for key in keys]

    def get_ranges(self, ranges: Sequence[tuple[str, int, int]]) -> builtins.list[bytearray]:
        """The bytes of each ``(key, start, length)``, in order (one after another here)."""
        return [self.get_range(key, start, length) for key, start, length in ranges]

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Write a whole object atomically (replacing any previous one)."""

    @abstractmethod
    def open_writer(self, key: str) -> ObjectWriter: ...

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "", start_after: str | None = None) -> builtins.list[str]: ...

    @abstractmethod
    def list_dir(self, prefix: str = "") -> builtins.list[str]: ...

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove an object; a missing key is not an error."""

    def special_entries(self, prefix: str = "") -> builtins.list[str]:
        """The names of a "directory" prefix's immediate entries that :meth:`list_dir` leaves
        out because they are neither a directory nor an object (on local disk: a symlink, a
        FIFO, a device), never followed; empty where every entry is an object (here)."""
        return []

    # -- only where ``capabilities`` says so --
    def put_conditional(
        self, key: str, data: bytes, if_none_match: bool = False, if_match: str | None = None
    ) -> str | None:
        """Write ``key`` only if it does not exist (``if_none_match``) or still has the ETag
        ``if_match``; the new ETag, or None when the condition failed (another writer won).
        Only with ``capabilities.conditional_put``."""
        raise self._unsupported("conditional writes", "conditional_put")

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        """An object's bytes and its ETag (KeyError if missing). Only with
        ``capabilities.conditional_put``."""
        raise self._unsupported("ETags", "conditional_put")

    def get_with_age(self, key: str) -> tuple[bytes, str, float | None]:
        """An object's bytes, its ETag and how many seconds ago it was last written by the
        server's clock (None if unknown; KeyError if missing). Only with
        ``capabilities.conditional_put``."""
        raise self._unsupported("ETags", "conditional_put")

    def local_directory(self) -> Path:
        """The directory holding the objects as files. Only with ``capabilities.local_path``."""
        raise self._unsupported("a local directory", "local_path")

    def _unsupported(self, what: str, capability: str) -> StorageError:
        return StorageError(
            f"{self!r} has no {what}: its capabilities do not include {capability} (ask "
            "store.capabilities before calling this)"
        )

    def stats(self) -> dict[str, Any]:
        """Request counters of backends that make requests (written to the end marker)."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook for backends that hold resources
        """Release what the store holds open (cached descriptors, a thread pool); the store
        stays usable and opens them again when next used."""

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"
