"""Storage behind a small interface: local directories, memory, and (later) object storage."""

from tensortap.storage.base import ObjectWriter, Store, validate_key
from tensortap.storage.local import LocalStore
from tensortap.storage.memory import MemoryStore
from tensortap.storage.resolve import local_path, open_store, register_store, what_is_there

__all__ = [
    "LocalStore",
    "MemoryStore",
    "ObjectWriter",
    "Store",
    "local_path",
    "open_store",
    "register_store",
    "validate_key",
    "what_is_there",
]
