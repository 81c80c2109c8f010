"""Old home of the S3 store, kept so that ``from tensortap.s3 import S3Store`` still works: the
store lives in :mod:`tensortap.storage.s3` with the other backends."""

from tensortap.storage.s3 import (
    MAX_ATTEMPTS,
    PARALLEL_READS,
    PART_SIZE,
    READ_CHUNK,
    S3Store,
    error_code,
    is_transient,
    server_age,
)

__all__ = [
    "MAX_ATTEMPTS",
    "PARALLEL_READS",
    "PART_SIZE",
    "READ_CHUNK",
    "S3Store",
    "error_code",
    "is_transient",
    "server_age",
]
