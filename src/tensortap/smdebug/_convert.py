"""``convert(smdebug_trial, out)``: an smdebug trial rewritten in tensortap's format, read by the
same Trial API (``tensortap convert SMDEBUG_TRIAL OUT``; ``create_trial`` does it on opening)."""

from __future__ import annotations

import os
from typing import Any

from tensortap.core._collections import Collection, CollectionManager
from tensortap.core._recorder import SavePlan, records_from_array
from tensortap.core._records import Record, RecordKind, StepBatch
from tensortap.core._safe_regex import compile_untrusted_with_lookahead
from tensortap.exceptions import FormatError, StorageError, TensortapError
from tensortap.smdebug._reader import SmdebugReader, SmdebugStep
from tensortap.storage import Store, open_store
from tensortap.writer import TrialWriter

_RAW = SavePlan(raw=True, shape=False, reductions=())
_SHAPE = SavePlan(raw=False, shape=True, reductions=())


def convert(
    source: str | os.PathLike[str] | Store,
    out: str | os.PathLike[str] | Store,
    strict: bool = False,
) -> int:
    """Write the smdebug trial at ``source`` as a tensortap trial at ``out``; returns the number
    of (step, worker) pairs written.

    A damaged step or collections file is skipped and listed in the converted trial's
    ``problems()`` (``strict=True`` raises its FormatError instead). A failure to write the copy
    (a full disk) raises StorageError: a part-written copy is never a finished trial."""
    reader = SmdebugReader(open_store(source), strict=strict)
    workers = reader.workers()
    target = open_store(out)
    steps = list(reader.steps())
    names = {n for s in steps for n in (*s.tensors, *s.reductions)}
    collections = _collections(reader, names)
    batches: list[tuple[str, StepBatch]] = []
    for step in steps:
        try:
            batches.append((step.worker, _batch(step)))
        except TensortapError as exc:
            if strict:
                raise
            reader.problems.append(f"step {step.step} of {step.worker} cannot be kept: {exc}")
    writers = {w: TrialWriter(target, w, num_workers=len(workers)) for w in workers}
    statuses = []
    count = 0
    try:
        for worker, batch in batches:
            if count < len(workers):
                batch.collections = collections
            writers[worker].submit(batch)
            count += 1
    finally:
        for i, writer in enumerate(writers.values()):
            end: dict[str, Any] = {"converted_from": "smdebug", "ended": reader.ended()}
            if i == 0 and reader.problems:
                end["problems"] = list(reader.problems)
            statuses.append(writer.close(end))
    for status in statuses:
        if status.errors or status.steps_lost or status.steps_dropped:
            raise StorageError(
                f"the tensortap copy of {reader.store.location} could not be written in full "
                f"({status.errors} errors, {status.steps_lost} steps lost; last: "
                f"{status.last_error}); free some space or set TENSORTAP_CACHE elsewhere"
            )
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
    look-aheads (``^(?!gradient).*weight``), so they are resolved here, with RE2 (and one
    literal negative lookahead; see ``compile_untrusted_with_lookahead``), against the tensor
    names the trial holds. A regex that cannot be matched in linear time is listed in the
    problems; the collection keeps its listed names."""
    manager = CollectionManager()
    for name, entry in reader.collections().items():
        coll = manager.get(name) if name in manager else manager.add(Collection(name))
        members = set(entry["tensor_names"]) & names
        for pattern in entry["include_regex"]:
            try:
                regex = compile_untrusted_with_lookahead(
                    pattern, f"the regex of collection {name!r}"
                )
            except FormatError as exc:
                reader.problems.append(str(exc))
                continue
            members.update(n for n in names if len(n) <= 1000 and regex.search(n))
        coll.add(sorted(members))
    return manager.to_dict()
