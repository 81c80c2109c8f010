"""Encoding and decoding of the on-disk format (no I/O). See docs/format.md."""

from tensortap.format._index import (
    FORMAT_VERSION,
    REDUCTION_CODES,
    IndexBuilder,
    SegmentIndex,
    decode_index,
)
from tensortap.format._layout import TRIAL_MARKER, validate_worker_name, worker_name

__all__ = [
    "FORMAT_VERSION",
    "REDUCTION_CODES",
    "TRIAL_MARKER",
    "IndexBuilder",
    "SegmentIndex",
    "decode_index",
    "validate_worker_name",
    "worker_name",
]
