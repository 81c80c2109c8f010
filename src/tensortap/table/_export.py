"""Trials as one Parquet dataset: every saved reduction and one-element value (losses,
metrics, norms, min/max/mean...) as rows, one partition per run, for DuckDB or any Parquet
reader.

Layout under the dataset's root (a directory or an ``s3://`` prefix)::

    run=<run>/part-000000.parquet      rows of the run, sorted by global step
    run=<run>/part-000001.parquet      what the next export found new
    _tensortap/runs/<run>.json         per worker, the segments exported and those pending
    _tensortap/exports/<run>/          the claim of the run's one exporter (lock or lease)
    config/run=<run>/config.parquet    the run's configuration (trial.config()), rewritten by
                                       each export (see tensortap.table._config)

Columns (the run is the partition): worker, mode, step (within the mode), global_step,
wall_time, tensor, collection, statistic (``value`` for a saved value, ``l2``, ``abs_max``...)
and value. An export of a trial still training writes only the segments published since the
last one, in a new part: nothing is rewritten, and a row is never written twice (a part whose
manifest update was lost to a crash is written again under the same name).
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tensortap.core._collections import Collection
from tensortap.exceptions import FormatError, InvalidConfigError, StorageError, TensortapError
from tensortap.format import _layout as layout
from tensortap.storage import Store, open_store
from tensortap.table._config import write_run_config
from tensortap.trials._columns import SegmentRef, published_segments, scalar_columns
from tensortap.trials._locate import TRIAL_DIR
from tensortap.trials._trial import Trial, create_trial
from tensortap.writer._ownership import Claim, claim_prefix, describe_owner

SCHEMA = pa.schema(
    [
        ("worker", pa.string()),
        ("mode", pa.string()),
        ("step", pa.int64()),
        ("global_step", pa.int64()),
        ("wall_time", pa.float64()),
        ("tensor", pa.string()),
        ("collection", pa.string()),
        ("statistic", pa.string()),
        ("value", pa.float64()),
    ]
)
MANIFESTS = "_tensortap/runs/"
EXPORTS = "_tensortap/exports/"  # <run>/: the claim of the run's exporter
EXPORT_WAIT = 60.0  # seconds a second exporter of a run waits for the first
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# Collections every tensor may also be in: a tensor's own is the more specific one.
_GENERIC = ("all", "default", "scalars")


@dataclass(frozen=True)
class Exported:
    """What one export of one run wrote."""

    run: str
    rows: int  # rows written now
    part: str | None  # the part written now (None: nothing new)
    segments: int  # segments taken now
    pending: int = 0  # segments listed but unreadable now: left for the next export


def export_parquet(
    trials: Iterable[str | os.PathLike[str] | Trial],
    out: str | os.PathLike[str] | Store,
    runs: Sequence[str] | None = None,
    *,
    wait: float = EXPORT_WAIT,
) -> list[Exported]:
    """Export (or bring up to date) each trial (a location, a job directory, or a Trial) as a
    run of the dataset at ``out``. A run is named after its trial's directory (the job's, for
    a job's ``JOB/trial``) unless ``runs`` names them. A location that holds no trial is an
    error (NotATrialError), raised before anything is written. One exporter per run at a time:
    an export of a run another process is exporting waits for it up to ``wait`` seconds, then
    raises ExportError naming it. A segment that cannot be read now is left pending
    (``Exported.pending``) and taken by a later export once readable (a Trial passed in reads
    each index once: pass locations to have pending segments read again)."""
    given = list(trials)
    if runs is not None and len(runs) != len(given):
        raise InvalidConfigError(
            f"runs names one run per trial: got {len(runs)} names for {len(given)} trials"
        )
    opened = [t if isinstance(t, Trial) else create_trial(t, must_exist=True) for t in given]
    names = list(runs) if runs is not None else [run_name_of(t.path) for t in opened]
    seen: dict[str, str] = {}
    for name, trial in zip(names, opened, strict=True):
        check_run_name(name)
        if name in seen:
            raise InvalidConfigError(
                f"two trials would be exported as run {name!r} ({seen[name]} and {trial.path}); "
                "name the runs (--run) so that each is unique"
            )
        seen[name] = trial.path
    store = open_store(out)
    return [export_trial(t, store, n, wait=wait) for t, n in zip(opened, names, strict=True)]


# The last part of a job's trial location: a job's own directory (``tensortap run``), the
# SageMaker layout of ``s3_output_path`` (``.../JOB/debug-output``), and jobs of before.
_JOB_TRIAL_NAMES = (TRIAL_DIR, "debug-output", "tensortap")


def run_name_of(location: str) -> str:
    """A trial's default run name: its directory's name, or the job's for a job's trial
    (``.../JOB/trial``, ``.../JOB/debug-output``)."""
    parts = [p for p in location.rstrip("/").split("/") if p]
    if len(parts) > 1 and parts[-1] in _JOB_TRIAL_NAMES:
        return parts[-2]
    return parts[-1] if parts else location


def check_run_name(name: str) -> str:
    """A run name is a partition directory: letters, digits, ``.``, ``_`` and ``-``."""
    if not isinstance(name, str) or not _RUN_NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidConfigError(
            f"a run name must be 1 to 128 letters, digits, '.', '_' or '-' (not starting with "
            f"'.', '_' or '-'), got {name!r}; give the run another name"
        )
    return name


def export_trial(trial: Trial, store: Store, run: str, *, wait: float = EXPORT_WAIT) -> Exported:
    """Append what ``trial`` published since the last export of ``run`` to the dataset.

    One exporter per run at a time: the run is claimed as writers claim their worker (a lock
    file on local disk, a lease on S3); a second exporter waits up to ``wait`` seconds for it,
    then is refused with ExportError naming the owner."""
    check_run_name(run)
    if not isinstance(wait, int | float) or wait < 0:
        raise InvalidConfigError(f"wait must be a number of seconds >= 0, got {wait!r}")
    claim = _claim_run(store, run, float(wait))
    try:
        return _export_claimed(trial, store, run, claim)
    finally:
        claim.release()


def _claim_run(store: Store, run: str, wait: float) -> Claim:
    info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
    info["session"] = f"export of run {run}"

    def busy(owner: dict[str, Any], extra: str) -> ExportError:
        return ExportError(
            f"run {run!r} of {store.location} is being exported by {describe_owner(owner)}"
            f"{extra}, and was still after waiting {wait:g} s. Two exports of one run at once "
            "would duplicate or lose rows: wait for it to finish (or give a longer wait) and "
            "export again"
        )

    deadline = time.monotonic() + wait
    pause = 0.01
    while True:
        try:
            return claim_prefix(store, EXPORTS + run + "/", info, busy)
        except ExportError:
            if time.monotonic() >= deadline:
                raise
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 0.5)


def _export_claimed(trial: Trial, store: Store, run: str, claim: Claim) -> Exported:
    manifest = _load_manifest(store, run)  # read under the claim: the last exporter's
    if manifest is None:
        manifest = {"run": run, "trial": trial.path, "next_part": 0, "rows": 0, "segments": {}}
    elif manifest.get("trial") != trial.path:
        raise InvalidConfigError(
            f"run {run!r} of {store.location} was exported from {manifest.get('trial')}, not "
            f"{trial.path}; give this trial another run name"
        )
    marks: dict[str, int] = {str(k): int(v) for k, v in manifest["segments"].items()}
    done: dict[str, set[int]] = {
        str(k): {int(s) for s in v} for k, v in (manifest.get("done") or {}).items()
    }
    segments = [
        seg
        for seg in published_segments(trial.parts, marks)
        if seg.seq not in done.get(seg.worker, ())
    ]
    unread = _unreadable_segments(trial, marks, segments, done)
    segments, columns = _readable_columns(trial, segments, unread)
    table = _table(trial, columns) if segments else None
    part = None
    rows = 0 if table is None else table.num_rows
    if table is not None and rows:
        _keep(claim, store, run)
        part = f"run={run}/part-{int(manifest['next_part']):06d}.parquet"
        sink = io.BytesIO()
        pq.write_table(table, sink, compression="zstd", row_group_size=1 << 17)
        store.put(part, sink.getvalue())
        manifest["next_part"] = int(manifest["next_part"]) + 1
        manifest["rows"] = int(manifest["rows"]) + rows
    for seg in segments:
        done.setdefault(seg.worker, set()).add(seg.seq)
    # Each worker's mark: every segment at or below it is exported. It never passes a segment
    # that could not be read (it stays pending, and the next export tries it again); the
    # segments exported above the mark are remembered in "done", so none is taken twice.
    for worker in sorted(set(done) | set(unread)):
        taken = done.get(worker, set())
        blocked = unread.get(worker)
        top = max(taken, default=marks.get(worker, -1))
        mark = max(marks.get(worker, -1), min(blocked) - 1 if blocked else top)
        marks[worker] = mark
        done[worker] = {s for s in taken if s > mark}
    manifest["segments"] = marks
    manifest["done"] = {w: sorted(s) for w, s in done.items() if s}
    manifest["pending"] = {w: sorted(s) for w, s in unread.items() if s}
    _keep(claim, store, run)
    write_run_config(trial, store, run)  # the run's configuration as it is now
    store.put(MANIFESTS + run + ".json", json.dumps(manifest, sort_keys=True).encode())
    pending = sum(len(s) for s in unread.values())
    return Exported(run, rows, part, len(segments), pending)


def _unreadable_segments(
    trial: Trial, marks: Mapping[str, int], read: Sequence[Any], done: Mapping[str, set[int]]
) -> dict[str, set[int]]:
    """Per worker, the segments above its mark whose index the trial listed but could not
    read (damaged, or a read that failed): they are left pending, never skipped. An index
    published after the trial's listing is left to the next export: a merged one (compaction)
    holds segments numbered below it that this export has not read, so counting it here
    would move the mark past them."""
    index = trial.parts.saved_index
    readable = {(seg.worker, int(seg.index.header["seq"])) for seg in index.segments}
    readable.update(  # merged segments (compaction): read as the segments they replaced
        (worker, seq) for worker, state in index.workers.items() for seq in state.merged_seqs
    )
    out: dict[str, set[int]] = {}
    for worker, state in index.workers.items():
        listed = state.last_index_key  # what the trial listed: a later key is not read yet
        for key in index.store.list(layout.index_prefix(worker)):
            seq = layout.seq_of(key)
            if (
                listed is not None
                and key <= listed
                and key.endswith(layout.INDEX_SUFFIX)
                and seq is not None
                and seq > marks.get(worker, -1)
                and seq not in done.get(worker, ())
                and (worker, seq) not in readable
            ):
                out.setdefault(worker, set()).add(seq)
    return out


def _readable_columns(
    trial: Trial, segments: list[SegmentRef], unread: dict[str, set[int]]
) -> tuple[list[SegmentRef], dict[str, np.ndarray]]:
    """The rows of ``segments``, read together; when some values cannot be read now (a data
    object missing, damaged, or a read that failed), segment by segment: the segments that
    fail join ``unread`` (pending, tried again by the next export), the others are taken."""
    try:
        return segments, scalar_columns(trial.parts, segments)
    except (FormatError, StorageError):
        pass
    good = []
    for seg in segments:
        try:
            scalar_columns(trial.parts, [seg])
        except (FormatError, StorageError):
            unread.setdefault(seg.worker, set()).add(seg.seq)
        else:
            good.append(seg)
    return good, scalar_columns(trial.parts, good)


def _keep(claim: Claim, store: Store, run: str) -> None:
    """Before each write: the run is still this exporter's (a lease can be lost)."""
    lost = claim.renew()
    if lost is not None:
        raise ExportError(
            f"the export of run {run!r} to {store.location} lost its claim ({lost}); nothing "
            "more was written: export again"
        )


def _load_manifest(store: Store, run: str) -> dict[str, Any] | None:
    try:
        raw = store.get(MANIFESTS + run + ".json")
    except KeyError:
        return None
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or not isinstance(doc.get("segments"), dict):
            raise ValueError("not a manifest")
        return doc
    except ValueError as exc:
        raise ExportError(
            f"the export manifest of run {run!r} in {store.location} is damaged ({exc}); "
            "export the run again into a new dataset"
        ) from exc


class ExportError(TensortapError):
    """A dataset cannot be brought up to date."""


def _table(trial: Trial, columns: Mapping[str, np.ndarray]) -> pa.Table:
    """The rows as an Arrow table in the dataset's schema, sorted by global step."""
    names = columns["tensor"]
    unique, inverse = np.unique(names.astype(str), return_inverse=True)
    owners = primary_collections([str(n) for n in unique], trial.collections().values())
    collection = np.array([owners[str(n)] for n in unique], dtype=object)[inverse]
    arrays = {**columns, "collection": collection}
    table = pa.table({f.name: pa.array(arrays[f.name], type=f.type) for f in SCHEMA}, SCHEMA)
    order = [("global_step", "ascending"), ("worker", "ascending"), ("tensor", "ascending")]
    return table.sort_by(order)


def primary_collections(names: Sequence[str], collections: Iterable[Collection]) -> dict[str, str]:
    """Each tensor's own collection: the first by name of those it is in, a generic one
    (``all``, ``default``, ``scalars``) only if it is in no other; ``""`` if in none."""
    ordered = sorted(collections, key=lambda c: (c.name in _GENERIC, c.name))
    out = {}
    for name in names:
        out[name] = next((c.name for c in ordered if c.matches(name)), "")
    return out
