"""Reading a trial written by SageMaker Debugger (smdebug 1.0): its index files say where each
tensor of each step and worker lies in the event files; reductions are tensors named
``smdebug/reductions/<name>/<tensor>`` (``abs_<name>`` on the absolute value)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensortap.core.modes import ModeKeys
from tensortap.exceptions import FormatError, StorageError
from tensortap.smdebug.wire import record_payload, summary_values
from tensortap.storage import Store

INDEX = "index/"
REDUCTION_PREFIX = "smdebug/reductions/"
END_MARKER = "training_job_end.ts"
_INDEX_FILE = re.compile(r"^index/\d+/(\d+)_(.+)\.json$")
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


class SmdebugReader:
    """The steps, workers and collections of an smdebug trial in ``store``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._index: list[tuple[int, str, str]] = []  # (step, worker, key)
        for key in store.list(INDEX):
            found = _INDEX_FILE.match(key)
            if found:
                self._index.append((int(found.group(1)), found.group(2), key))
        self._index.sort()
        if not self._index:
            raise FormatError(f"no smdebug index files under {store.location}/{INDEX}")

    def workers(self) -> list[str]:
        return sorted({w for _, w, _ in self._index})

    def ended(self) -> bool:
        return self.store.exists(END_MARKER)

    def steps(self) -> Iterator[SmdebugStep]:
        """Every (step, worker) in step order, its tensors read from the event files."""
        for step, worker, key in self._index:
            yield self._read(step, worker, key)

    def _read(self, step: int, worker: str, key: str) -> SmdebugStep:
        try:
            index = json.loads(self.store.get(key))
            meta = index["meta"]
            mode = _MODES[str(meta.get("mode", "GLOBAL"))]
            out = SmdebugStep(worker, step, mode, int(meta.get("mode_step", step)))
            events = str(meta["event_file_name"])
            entries = index.get("tensor_payload", [])
            ranges = [(events, int(e["start_idx"]), int(e["length"])) for e in entries]
        except (ValueError, KeyError, TypeError) as exc:
            raise FormatError(
                f"the smdebug index file {key} is not what smdebug writes: {exc}"
            ) from None
        try:
            records = self.store.get_ranges(ranges)
        except StorageError as exc:
            raise FormatError(
                f"the smdebug event file {events} does not hold what {key} says: {exc}"
            ) from None
        for record in records:
            for tag, array, wall, _ in summary_values(record_payload(bytes(record))):
                out.wall_time = wall
                if tag.startswith(REDUCTION_PREFIX):
                    reduction, _, name = tag[len(REDUCTION_PREFIX) :].partition("/")
                    on_abs = reduction.startswith("abs_")
                    spec = (reduction.removeprefix("abs_"), on_abs)
                    out.reductions.setdefault(name, {})[spec] = float(array.reshape(-1)[0])
                else:
                    out.tensors[tag] = array
        return out

    def collections(self) -> dict[str, dict[str, Any]]:
        """smdebug's collections (name -> include_regex and tensor_names), over all workers."""
        merged: dict[str, dict[str, Any]] = {}
        for key in self.store.list("collections/"):
            if not key.endswith("_collections.json"):
                continue
            try:
                data = json.loads(self.store.get(key)).get("collections", {})
            except ValueError as exc:
                raise FormatError(
                    f"the smdebug collections file {key} is not JSON: {exc}"
                ) from None
            for name, entry in data.items():
                into = merged.setdefault(name, {"include_regex": [], "tensor_names": []})
                for k in ("include_regex", "tensor_names"):
                    for value in entry.get(k) or []:
                        if value not in into[k]:
                            into[k].append(value)
        return merged
