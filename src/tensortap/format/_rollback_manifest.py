"""``rollback.json``: the manifest a rollback checkpoint directory keeps beside its files
(``DistributedCheckpoints``): the step, the rollback's ``extra`` (where the batch stream was),
and every file of the checkpoint with its size and SHA-256, recorded when it was saved.

One validated decoder: a damaged or hostile manifest is a FormatError naming the field and what
it held, never an untyped error. The digests are what a load checks before any weight changes
(and before the checkpoint's pickled ``.metadata`` is read at all).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from tensortap.exceptions import FormatError
from tensortap.format._documents import decode_json, encode_json
from tensortap.format._fields import get_dict, get_int

MANIFEST_KIND = "tensortap-rollback-checkpoint"
MANIFEST_NAME = "rollback.json"
METADATA_NAME = ".metadata"
#: The largest manifest read (its ``extra`` is a few numbers; its files a few per rank).
MAX_MANIFEST_BYTES = 4 << 20
#: The most files one checkpoint may list.
MAX_FILES = 100_000
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class FileDigest:
    """A file of a checkpoint as it was saved."""

    size: int
    sha256: str


@dataclass(frozen=True)
class RollbackManifest:
    step: int
    extra: dict[str, Any]
    files: dict[str, FileDigest]


def encode_manifest(step: int, extra: dict[str, Any], files: dict[str, FileDigest]) -> bytes:
    """The manifest's bytes (``extra`` must be JSON: finite numbers, strings, lists, dicts)."""
    body = {
        "step": step,
        "extra": extra,
        "files": {name: {"size": d.size, "sha256": d.sha256} for name, d in sorted(files.items())},
    }
    try:
        return encode_json(MANIFEST_KIND, body)
    except (TypeError, ValueError) as exc:
        raise FormatError(
            f"a rollback checkpoint's extra must be JSON (finite numbers, strings, lists, "
            f"dicts), got {type(exc).__name__}: {exc}"
        ) from exc


def decode_manifest(raw: bytes, what: str) -> RollbackManifest:
    """The manifest in ``raw``; FormatError (naming ``what``) for anything else."""
    if len(raw) > MAX_MANIFEST_BYTES:
        raise FormatError(
            f"{what} has {len(raw)} bytes, more than the {MAX_MANIFEST_BYTES} a rollback "
            "manifest may have"
        )
    doc = decode_json(raw, MANIFEST_KIND, what)
    step = get_int(doc, "step", what)
    if step < 0:
        raise FormatError(f"{what}: field 'step' must be >= 0, got {step}")
    extra = get_dict(doc, "extra", what)
    _check_json(extra, what)
    listed = get_dict(doc, "files", what)
    if len(listed) > MAX_FILES:
        raise FormatError(f"{what} lists {len(listed)} files, more than {MAX_FILES}")
    files: dict[str, FileDigest] = {}
    for name, entry in listed.items():
        where = f"{what}: file {name[:60]!r}"
        if not _NAME.match(name) or name in (".", "..", MANIFEST_NAME):
            raise FormatError(
                f"{where} is not a plain file name of the checkpoint's directory (letters, "
                "digits, '_', '.', '-'; not the manifest itself)"
            )
        if not isinstance(entry, dict):
            raise FormatError(f"{where} must be an object with size and sha256")
        size = get_int(entry, "size", where)
        digest = entry.get("sha256")
        if size < 0:
            raise FormatError(f"{where}: size must be >= 0, got {size}")
        if not isinstance(digest, str) or not _SHA256.match(digest):
            raise FormatError(f"{where}: sha256 must be 64 lowercase hex digits")
        files[name] = FileDigest(size, digest)
    if METADATA_NAME not in files:
        raise FormatError(f"{what} does not list the checkpoint's {METADATA_NAME}")
    return RollbackManifest(step, extra, files)


def _check_json(value: Any, what: str) -> None:
    """``json.loads`` gives only JSON values; NaN and infinities are refused (the encoder never
    writes them)."""
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise FormatError(f"{what}: extra holds a non-finite number")
        if isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
