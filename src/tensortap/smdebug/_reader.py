"""Reading a trial written by SageMaker Debugger (smdebug 1.0): its index files say where each
tensor of each step and worker lies in the event files; reductions are tensors named
``smdebug/reductions/<name>/<tensor>`` (``abs_<name>`` on the absolute value)."""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensortap.core._modes import ModeKeys
from tensortap.exceptions import FormatError, StorageError
from tensortap.smdebug._wire import record_payload, summary_values
from tensortap.storage import Store

INDEX = "index/"
REDUCTION_PREFIX = "smdebug/reductions/"
END_MARKER = "training_job_end.ts"
_INDEX_FILE = re.compile(r"^index/\d+/(\d+)_(.+)\.json$")
_EVENT_FILE = re.compile(r"^events/\d+/(\d+)_(.+)\.tfevents$")
_MODES = {m.name: m for m in ModeKeys}


def is_smdebug_trial(store: Store) -> bool:
    """An smdebug trial has index files and event files (and none of tensortap's)."""
    return bool(store.list(INDEX)) and bool(store.list("events/"))


@dataclass
class SmdebugStep:
    """One worker's tensors at one global step."""

    worker: str
    step: int
    mode: ModeKeys
    mode_step: int
    wall_time: float = 0.0
    tensors: dict[str, np.ndarray[Any, Any]] = field(default_factory=dict)
    reductions: dict[str, dict[tuple[str, bool], float]] = field(default_factory=dict)


#: What decoding damaged bytes or JSON can raise besides FormatError: turned into FormatError.
_DAMAGE = (
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    IndexError,
    OverflowError,
    RecursionError,
    MemoryError,
    struct.error,
    UnicodeError,
)


class SmdebugReader:
    """The steps, workers and collections of an smdebug trial in ``store``.

    A damaged index, event or collections file is skipped and its FormatError message (which
    names the file) listed in :attr:`problems`; ``strict=True`` raises it instead."""

    def __init__(self, store: Store, strict: bool = False) -> None:
        self.store = store
        self.strict = strict
        self.problems: list[str] = []
        self._index: list[tuple[int, str, str]] = []  # (step, worker, key)
        seen: dict[tuple[int, str], str] = {}
        for key in store.list(INDEX):
            found = _INDEX_FILE.match(key)
            if not found:
                continue
            step, worker = int(found.group(1)), found.group(2)
            if step > _MAX_STEP:  # this file is left out, not the trial
                self._problem(
                    FormatError(f"the smdebug index file {key} names step {step}: over 2**63 - 1")
                )
                continue
            if (step, worker) in seen:  # never two versions of one step: neither is guessed
                self._problem(
                    FormatError(
                        f"the smdebug index files {seen[step, worker]} and {key} both describe "
                        f"step {step} of {worker}; {key} is skipped"
                    )
                )
                continue
            seen[step, worker] = key
            self._index.append((step, worker, key))
        self._index.sort()
        if not self._index:
            raise FormatError(f"no smdebug index files under {store.location}/{INDEX}")

    def _problem(self, exc: FormatError) -> None:
        if self.strict:
            raise exc
        self.problems.append(str(exc))

    def workers(self) -> list[str]:
        return sorted({w for _, w, _ in self._index})

    def ended(self) -> bool:
        return self.store.exists(END_MARKER)

    def steps(self) -> Iterator[SmdebugStep]:
        """Every readable (step, worker) in step order, its tensors read from the event files;
        a damaged one is listed in :attr:`problems` (raised when ``strict``)."""
        for step, worker, key in self._index:
            try:
                found = self._read(step, worker, key)
            except FormatError as exc:
                self._problem(exc)
                continue
            yield found

    def _read(self, step: int, worker: str, key: str) -> SmdebugStep:
        events = "?"
        try:
            index = json.loads(self.store.get(key))
            meta = index["meta"]
            mode = _MODES[str(meta.get("mode", "GLOBAL"))]
            out = SmdebugStep(worker, step, mode, _step_number(meta.get("mode_step", step)))
            events = str(meta["event_file_name"])
            expected = _EVENT_FILE.match(events)
            if not expected or (int(expected.group(1)), expected.group(2)) != (step, worker):
                raise ValueError(f"its event file {events!r} is not that of step {step}, {worker}")
            entries = index.get("tensor_payload", [])
            ranges = [(events, int(e["start_idx"]), int(e["length"])) for e in entries]
            names = [e.get("tensorname") for e in entries]
            if any(start < 0 or length < 16 for _, start, length in ranges):
                raise ValueError("a negative start or a length under 16 bytes")
        except StorageError as exc:
            raise FormatError(f"the smdebug index file {key} cannot be read: {exc}") from None
        except _DAMAGE as exc:
            raise FormatError(
                f"the smdebug index file {key} is not what smdebug writes: {exc!r}"
            ) from None
        try:
            records = self.store.get_ranges(ranges)
        except (StorageError, KeyError) as exc:
            raise FormatError(
                f"the smdebug event file {events} does not hold what {key} says: {exc!r}"
            ) from None
        try:
            for record, name in zip(records, names, strict=True):
                for tag, array, wall, at in summary_values(record_payload(record, events)):
                    if at != step or (isinstance(name, str) and name != tag):
                        raise ValueError(
                            f"{tag!r} of step {at} where {key} says {name!r} of step {step}"
                        )
                    odd = _odd_value(array, wall)
                    if odd:  # this record is left out, the step's other records are kept
                        self._problem(
                            FormatError(
                                f"the smdebug event file {events}: {tag[:200]!r} of step "
                                f"{step} is left out: {odd}"
                            )
                        )
                        continue
                    out.wall_time = wall
                    if tag.startswith(REDUCTION_PREFIX):
                        reduction, _, of = tag[len(REDUCTION_PREFIX) :].partition("/")
                        on_abs = reduction.startswith("abs_")
                        spec = (reduction.removeprefix("abs_"), on_abs)
                        out.reductions.setdefault(of, {})[spec] = float(array.reshape(-1)[0])
                    else:
                        out.tensors[tag] = array
        except FormatError as exc:
            raise FormatError(f"the smdebug event file {events} is corrupt: {exc}") from None
        except _DAMAGE as exc:
            raise FormatError(
                f"the smdebug event file {events} is not what smdebug writes: {exc!r}"
            ) from None
        return out

    def collections(self) -> dict[str, dict[str, Any]]:
        """smdebug's collections (name -> include_regex and tensor_names), over all workers; a
        collections file that cannot be read, or one collection of it that is not what smdebug
        writes, is listed in :attr:`problems` and skipped (the file's other collections, and
        the other files, are kept)."""
        merged: dict[str, dict[str, Any]] = {}
        for key in self.store.list("collections/"):
            if not key.endswith("_collections.json"):
                continue
            try:
                found, problems = decode_collections(self.store.get(key), key)
            except StorageError as exc:
                self._problem(FormatError(f"the smdebug collections file {key}: {exc}"))
                continue
            except FormatError as exc:
                self._problem(exc)
                continue
            for problem in problems:
                self._problem(FormatError(problem))
            for name, entry in found.items():
                into = merged.setdefault(name, {"include_regex": [], "tensor_names": []})
                for k in ("include_regex", "tensor_names"):
                    for value in entry[k]:
                        if value not in into[k]:
                            into[k].append(value)
        return merged


#: The most bytes of one smdebug collections file read (smdebug's are a few KB; a hostile one
#: may be anything).
MAX_COLLECTIONS_BYTES = 16 * 1024 * 1024


def decode_collections(raw: bytes, key: str) -> tuple[dict[str, dict[str, list[str]]], list[str]]:
    """An smdebug collections file (``{"collections": {name: {"include_regex": [...],
    "tensor_names": [...], ...}}}``): each collection's regexes and names, and why each
    collection that is not what smdebug writes was left out. A FormatError when the file is no
    such document at all."""
    what = f"the smdebug collections file {key}"
    if len(raw) > MAX_COLLECTIONS_BYTES:
        raise FormatError(f"{what} holds {len(raw)} bytes; smdebug's hold a few KB")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        reason = "it is nested too deeply" if isinstance(exc, RecursionError) else repr(exc)
        raise FormatError(f"{what} is not JSON: {reason[:200]}") from None
    data = doc.get("collections") if isinstance(doc, dict) else None
    if not isinstance(data, dict):
        raise FormatError(
            f"{what} is not what smdebug writes: an object whose 'collections' maps names to "
            f"collections, got {type(doc).__name__}"
        )
    found: dict[str, dict[str, list[str]]] = {}
    problems: list[str] = []
    for name, entry in data.items():
        lists = [entry.get(k) if isinstance(entry, dict) else None for k in _COLLECTION_LISTS]
        if not isinstance(entry, dict) or not all(
            value is None or (isinstance(value, list) and all(isinstance(v, str) for v in value))
            for value in lists
        ):
            problems.append(
                f"{what}: collection {name[:200]!r} is left out: smdebug writes an object with "
                "include_regex and tensor_names as lists of strings"
            )
            continue
        found[name] = {k: list(v or []) for k, v in zip(_COLLECTION_LISTS, lists, strict=True)}
    return found, problems


_COLLECTION_LISTS = ("include_regex", "tensor_names")


_MAX_STEP = 2**63 - 1  # a step number is a signed 64-bit integer in tensortap's format


def _step_number(value: Any) -> int:
    """A step number from an smdebug index: an integer in [0, 2**63); ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"a step number must be an integer, got {str(value)[:40]!r}")
    number = int(value)
    if not 0 <= number <= _MAX_STEP:
        raise ValueError(f"a step number must lie in [0, 2**63), got {str(number)[:40]}")
    return number


def _odd_value(array: np.ndarray[Any, Any], wall: float) -> str:
    """Why one tensor record of a step cannot be kept (empty when it can): tensortap keeps
    numbers only (smdebug's ``DT_STRING`` tensors are text), and a wall time must be finite."""
    if array.dtype.kind not in "biufc":
        return f"a tensor of {array.dtype} (text); tensortap keeps numeric tensors only"
    if not np.isfinite(wall):
        return f"its wall time is {wall}; smdebug writes seconds since the epoch"
    return ""
