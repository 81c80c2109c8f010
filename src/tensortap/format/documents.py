"""The small JSON documents of a trial: the trial marker, worker info, end marker, collections."""

from __future__ import annotations

import json
from typing import Any

from tensortap.exceptions import FormatError
from tensortap.format.index import FORMAT_VERSION, check_version

TRIAL_KIND = "tensortap-trial"


def encode_json(kind: str, body: dict[str, Any]) -> bytes:
    doc = {"kind": kind, "format_version": FORMAT_VERSION, **body}
    return json.dumps(doc, sort_keys=True, indent=1, allow_nan=False).encode()


def decode_json(raw: bytes, kind: str, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise FormatError(f"{what} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("kind") != kind:
        raise FormatError(f"{what} is not a tensortap {kind} document")
    check_version(doc.get("format_version"), what)
    return doc


def trial_marker() -> bytes:
    return encode_json(TRIAL_KIND, {})
