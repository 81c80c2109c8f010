"""The writing sessions of a trial's workers, as the reader knows them (see
:mod:`tensortap.writer._sessions` for what a session is and how its steps continue)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tensortap.format._documents import MAX_TIME as MAX_TIME  # re-exported: its old home
from tensortap.trials._index import WorkerState


def session_time(value: object) -> float | None:
    """A record's time in seconds since 1970, or None when it holds none that a clock could
    show (missing, not a number, negative, past :data:`MAX_TIME`)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= MAX_TIME:
        return float(value)
    return None


@dataclass(frozen=True)
class Session:
    """One writing session of one worker: a script run, a trainer resumed from a checkpoint.

    ``resumed_from_step`` is the last global step the worker held when the session began (None
    for a first session); ``first_step`` and ``last_step`` are the global steps it published
    first and last (None while it has published none). ``mode_steps`` says where each mode's
    steps continued (``{"TRAIN": 20, "EVAL": 2}``), ``step_source`` what set them when the
    training's own count did (``"the Trainer's global_step"``), and ``rolled_back`` the
    ``(mode, first, last)`` step numbers it counted again (resumed from a checkpoint older than
    the last saved step). ``events`` are what the session recorded with
    :meth:`tensortap.hook._hook.Hook.record_event` (dicts with ``kind``, ``global_step`` and
    ``fields``: an attribution by replay, say). A session written by a tensortap from before
    sessions were recorded is known by its steps only: its ``started``, ``host`` and ``pid``
    are None.

    A session that a rollback started (:class:`tensortap.pytorch.Rollback`) is a **branch**:
    ``branch_of`` is the id of the session it forks from, ``branch_step`` the step of
    ``branch_mode`` training was restored to (its checkpoint), ``branch_global_step`` the parent's
    global step there (None when unknown) and ``branch_reason`` why. All are None otherwise.
    """

    worker: str
    index: int
    id: str | None
    started: float | None
    host: str | None
    pid: int | None
    resumed_from_step: int | None
    first_step: int | None
    last_step: int | None
    mode_steps: dict[str, int] = field(default_factory=dict)
    step_source: str | None = None
    rolled_back: tuple[tuple[str, int, int], ...] = ()
    events: tuple[dict[str, Any], ...] = ()
    branch_of: str | None = None
    branch_step: int | None = None
    branch_mode: str | None = None
    branch_global_step: int | None = None
    branch_reason: str | None = None

    @property
    def resumed(self) -> bool:
        """True when the session continued steps an earlier one had published."""
        return self.resumed_from_step is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "index": self.index,
            "id": self.id,
            "started": self.started,
            "host": self.host,
            "pid": self.pid,
            "resumed_from_step": self.resumed_from_step,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "mode_steps": dict(self.mode_steps),
            "step_source": self.step_source,
            "rolled_back": [list(r) for r in self.rolled_back],
            "events": [dict(e) for e in self.events],
            "branch_of": self.branch_of,
            "branch_step": self.branch_step,
            "branch_mode": self.branch_mode,
            "branch_global_step": self.branch_global_step,
            "branch_reason": self.branch_reason,
        }

    @property
    def branched(self) -> bool:
        """True when a rollback started this session from an earlier one's checkpoint."""
        return self.branch_of is not None


def worker_sessions(state: WorkerState, records: dict[int, dict[str, Any]]) -> list[Session]:
    """A worker's sessions, in order: its session records, and before them the sessions that
    published without one (known from the ``session`` of their index headers)."""
    spans = state.session_spans
    recorded = {str(doc["session"]) for doc in records.values()}
    unrecorded = [
        (sid, (span[0], span[1])) for sid, span in spans.items() if sid not in recorded and span
    ]
    out = [
        Session(state.name, i, None if sid == "None" else sid, None, None, None, None, *span)
        for i, (sid, span) in enumerate(unrecorded)
    ]
    return out + recorded_sessions(state.name, records, spans)


def recorded_sessions(
    worker: str,
    records: dict[int, dict[str, Any]],
    spans: Mapping[str, Sequence[int]] | None = None,
) -> list[Session]:
    """The sessions a worker's decoded session records say, in order, a branch's fork put
    right where tensortap before issue 46 wrote it wrong (:func:`old_fork`). ``spans``: each
    session's first and last global step, from the trial's index (without it, None: what the
    dashboard reads without opening the index)."""
    out = []
    for index in sorted(records):
        doc = records[index]  # checked by decode_session: every field is of its kind and range
        first, last = (spans or {}).get(str(doc["session"])) or (None, None)
        started = doc.get("started")
        out.append(
            Session(
                worker=worker,
                index=index,
                id=str(doc["session"]),
                started=None if started is None else float(started),
                host=doc.get("host"),
                pid=doc.get("pid"),
                resumed_from_step=doc.get("resumed_from_step"),
                first_step=first,
                last_step=last,
                mode_steps=dict(doc.get("mode_steps") or {}),
                step_source=doc.get("step_source"),
                rolled_back=tuple((m, a, b) for m, a, b in doc.get("rolled_back", [])),
                events=tuple(dict(e) for e in doc.get("events", [])),
                **_branch(doc),
            )
        )
    by_id = {str(records[i]["session"]): records[i] for i in records}
    for k, session in enumerate(out):
        parent = by_id.get(session.branch_of or "")
        fixed = None if parent is None else old_fork(records[session.index], parent)
        if fixed is not None:
            out[k] = replace(session, branch_global_step=fixed)
    return out


def old_fork(branch: dict[str, Any], parent: dict[str, Any]) -> int | None:
    """The fork of ``branch`` that tensortap before issue 46 wrote wrong, in the parent's
    numbering, or None when it is not that. Each is a session record (``branch_step``,
    ``branch_mode``, ``branch_global_step``, ``resumed_from_step``, ``mode_steps``). A second
    rollback to the checkpoint its parent (a branch) began from recorded the parent's first
    global step plus ``branch_step`` (106 for a parent that began at global step 56, TRAIN
    step 50), where the parent trained that step at its first global step (56). That came of
    a new hook's GLOBAL count of 0: a parent whose record carries a GLOBAL count (a hook that
    numbers global steps only) was never written wrong this way."""
    step, at = branch.get("branch_step"), branch.get("branch_global_step")
    resumed = parent.get("resumed_from_step")
    if not (isinstance(step, int) and isinstance(at, int) and isinstance(resumed, int)):
        return None
    counts = parent.get("mode_steps")
    if step <= 0 or (isinstance(counts, dict) and counts.get("GLOBAL")):
        return None
    first = resumed + 1  # the parent's first global step
    same = step == parent.get("branch_step") and branch.get("branch_mode") == parent.get(
        "branch_mode"
    )
    return first if same and at == first + step else None


def _branch(doc: dict[str, Any]) -> dict[str, Any]:
    """The branch fields of a session record (absent from records of sessions that were no
    branch, and from every record written before rollbacks existed: None); checked by
    decode_session."""
    parent = doc.get("branch_of")
    if parent is None:
        return {}
    return {
        "branch_of": parent,
        "branch_step": doc.get("branch_step"),
        "branch_mode": doc.get("branch_mode") or "TRAIN",
        "branch_global_step": doc.get("branch_global_step"),
        "branch_reason": doc.get("branch_reason"),
    }
