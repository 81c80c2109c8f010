"""One function turns what a user passes (a path, a URL, a Store) into a Store."""

from __future__ import annotations

import os
from collections.abc import Callable

from tensortap.exceptions import InvalidConfigError
from tensortap.storage.base import Store
from tensortap.storage.local import LocalStore
from tensortap.storage.memory import MemoryStore

StoreFactory = Callable[[str], Store]
_FACTORIES: dict[str, StoreFactory] = {}


def register_store(scheme: str, factory: StoreFactory) -> None:
    """Make ``scheme://...`` locations open with ``factory(location)``."""
    _FACTORIES[scheme.lower()] = factory


def open_store(location: str | os.PathLike[str] | Store) -> Store:
    """A Store for a local path, a ``file://`` or ``memory://`` URL, or a Store itself."""
    if isinstance(location, Store):
        return location
    if isinstance(location, os.PathLike):
        return LocalStore(location)
    if not isinstance(location, str) or not location:
        raise InvalidConfigError(
            f"expected a trial location (a directory path or URL), got {location!r}"
        )
    scheme, sep, _ = location.partition("://")
    if not sep:
        return LocalStore(location)
    factory = _FACTORIES.get(scheme.lower())
    if factory is None:
        raise InvalidConfigError(
            f"no storage backend for {scheme}:// (in {location!r}); known schemes: "
            f"{', '.join(sorted(_FACTORIES))}, or a plain directory path"
        )
    return factory(location)


def local_path(location: str | os.PathLike[str] | Store) -> str | None:
    """The directory a location names when it is local (a path or a ``file://`` URL), else
    None (another scheme, or a Store)."""
    if isinstance(location, Store):
        return None
    text = os.fspath(location)
    if text.startswith("file://"):
        return text[len("file://") :]
    return None if "://" in text else text


def what_is_there(store: Store) -> str:
    """Words for a store that holds nothing, for messages: whether its directory is missing or
    empty (a mistyped path is the usual cause)."""
    local = local_path(store.location)
    if local is None:
        return "nothing is stored under it"
    return "it is an empty directory" if os.path.isdir(local) else "it does not exist"


register_store("file", lambda url: LocalStore(url[len("file://") :]))
register_store("memory", lambda url: MemoryStore.named(url[len("memory://") :]))


def _s3(url: str) -> Store:
    from tensortap.storage.s3 import S3Store  # boto3 is imported only for s3:// locations

    return S3Store(url)


register_store("s3", _s3)
