"""Storage behind a small interface (:class:`Store`): local directories, memory and S3, each
backend one module that registers its URL scheme; :func:`open_store` turns a path or URL into a
Store and refuses a scheme no backend registered."""

from tensortap.storage._base import ObjectWriter, Store, StoreCapabilities, validate_key
from tensortap.storage._local import LocalStore
from tensortap.storage._memory import MemoryStore
from tensortap.storage._resolve import (
    check_location,
    known_schemes,
    local_path,
    open_store,
    register_store,
    unregister_store,
    what_is_there,
)
from tensortap.storage._s3 import S3Store

__all__ = [
    "LocalStore",
    "MemoryStore",
    "ObjectWriter",
    "S3Store",
    "Store",
    "StoreCapabilities",
    "check_location",
    "known_schemes",
    "local_path",
    "open_store",
    "register_store",
    "unregister_store",
    "validate_key",
    "what_is_there",
]
