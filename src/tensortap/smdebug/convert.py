"""``convert(smdebug_trial, out)``: an smdebug trial rewritten in tensortap's format, read by the
same Trial API (``tensortap convert SMDEBUG_TRIAL OUT``; ``create_trial`` does it on opening)."""

from __future__ import annotations

import os
import re
from typing import Any

from tensortap.core.collections import Collection, CollectionManager
from tensortap.core.recorder import SavePlan, records_from_array
from tensortap.core.records import Record, RecordKind, StepBatch
from tensortap.smdebug.reader import SmdebugReader, SmdebugStep
from tensortap.storage import Store, open_store
from tensortap.writer import TrialWriter

_RAW = SavePlan(raw=True, shape=False, reductions=())
_SHAPE = SavePlan(raw=False, shape=True, reductions=())


def convert(source: str | os.PathLike[str] | Store, out: str | os.PathLike[str] | Store) -> int:
    """Write the smdebug trial at ``source`` as a tensortap trial at ``out``; returns the number
    of (step, worker) pairs written."""
    reader = SmdebugReader(open_store(source))
    workers = reader.workers()
    target = open_store(out)
    writers = {w: TrialWriter(target, w, num_workers=len(workers)) for w in workers}
    steps = list(reader.steps())
    names = {n for s in steps for n in (*s.tensors, *s.reductions)}
    collections = _collections(reader, names)
    count = 0
    try:
        for step in steps:
            batch = _batch(step)
            if count < len(workers):
                batch.collections = collections
            writers[step.worker].submit(batch)
            count += 1
    finally:
        for writer in writers.values():
            writer.close({"converted_from": "smdebug", "ended": reader.ended()})
    return count


def _batch(step: SmdebugStep) -> StepBatch:
    records: list[Record] = []
    for name, array in step.tensors.items():
        records.extend(records_from_array(name, array, _RAW))
    for name, values in step.reductions.items():
        saved = step.tensors.get(name)  # the raw tensor, when the same step saved it too
        dtype = "<f4" if saved is None else records_from_array(name, saved, _SHAPE)[0].dtype
        shape: tuple[int, ...] = () if saved is None else saved.shape
        for (reduction, on_abs), value in values.items():
            records.append(
                Record(name, RecordKind.REDUCTION, dtype, shape, None, reduction, on_abs, value)
            )
    return StepBatch(step.step, step.mode, step.mode_step, step.wall_time, records)


def _collections(reader: SmdebugReader, names: set[str]) -> dict[str, Any]:
    """smdebug's collections with their members listed by name: smdebug's regexes use
    look-aheads (``^(?!gradient).*weight``), which tensortap's linear-time matcher refuses, so
    they are resolved here against the tensor names the trial holds."""
    manager = CollectionManager()
    for name, entry in reader.collections().items():
        coll = manager.get(name) if name in manager else manager.add(Collection(name))
        members = set(entry["tensor_names"]) & names
        for pattern in entry["include_regex"]:
            try:
                regex = re.compile(pattern)
            except re.error:
                continue
            members.update(n for n in names if len(n) <= 1000 and regex.search(n))
        coll.add(sorted(members))
    return manager.to_dict()
