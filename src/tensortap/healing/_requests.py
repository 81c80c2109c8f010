"""What a rollback was asked and what it heard, on this rank and agreed by every rank.

:class:`Inbox` takes requests (``request``, from any thread, and a rule's request file) and
the replays' evidence by batch id; :func:`agree` merges every rank's :class:`Request` (the
earliest step, every batch, the gravest evidence for a batch) through
:mod:`tensortap.healing._agreement`, as JSON: batch ids travel as JSON values (ints, strings,
tuples of them, a step's micro-batches, a step whose batch the guard was not told); another
rank's id of any other type arrives as its ``repr``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tensortap.core._rollback_decision import DATA, NUMERICS, REPRODUCIBLE, TRANSIENT, Evidence
from tensortap.core._rollback_request import RollbackRequests
from tensortap.exceptions import FormatError, InvalidConfigError
from tensortap.healing._agreement import any_flag, control_group, gather_documents
from tensortap.healing._budget import MicroBatches, TrainedAt, flatten

logger = logging.getLogger(__name__)

_GRAVITY = (NUMERICS, REPRODUCIBLE, DATA, TRANSIENT)
#: Batches whose last attribution is remembered.
_KEEP_EVIDENCE = 10_000


@dataclass(frozen=True)
class Request:
    """A request (``step`` None: this rank has none, only its evidence): the first bad step,
    the batches, why, and the replays' evidence by batch id."""

    step: int | None
    ids: list[Hashable] = field(default_factory=list)
    reason: str = ""
    evidence: dict[Hashable, Evidence] = field(default_factory=dict)

    def to_doc(self) -> dict[str, Any]:
        """As JSON values (what the other ranks read: :meth:`from_doc`)."""
        return {
            "step": self.step,
            "ids": [_id_doc(b) for b in self.ids],
            "reason": self.reason,
            "evidence": [
                [_id_doc(e.batch), e.kind, e.step, e.layer, e.message, e.rank]
                for e in self.evidence.values()
            ],
        }

    @classmethod
    def from_doc(cls, doc: Any, source: int) -> Request:
        """The request rank ``source`` sent; FormatError saying what is wrong with it."""
        where = f"rank {source}'s rollback request"
        if not isinstance(doc, dict) or set(doc) != {"step", "ids", "reason", "evidence"}:
            raise FormatError(f"{where} must be a dict of step, ids, reason, evidence: {doc!r}")
        step, ids, reason, rows = doc["step"], doc["ids"], doc["reason"], doc["evidence"]
        if step is not None and not _is_int(step):
            raise FormatError(f"{where}: step must be an int or None, got {step!r}")
        if not isinstance(ids, list) or not isinstance(reason, str) or not isinstance(rows, list):
            raise FormatError(f"{where}: ids and evidence must be lists, reason a string")
        evidence: dict[Hashable, Evidence] = {}
        for row in rows:
            if not (
                isinstance(row, list)
                and len(row) == 6
                and isinstance(row[1], str)
                and _is_int(row[2])
                and (row[3] is None or isinstance(row[3], str))
                and isinstance(row[4], str)
                and _is_int(row[5])
            ):
                raise FormatError(
                    f"{where}: evidence must be [batch, kind, step, layer, message, rank], "
                    f"got {row!r}"
                )
            batch = _id_of(row[0], where)
            evidence[batch] = Evidence(row[1], row[2], batch, row[3], row[4], row[5])
        return cls(step, [_id_of(b, where) for b in ids], reason, evidence)


class Inbox:
    """This rank's requests (merged until taken) and the replays' evidence by batch id."""

    def __init__(self, requests: RollbackRequests | None) -> None:
        self._requests = requests
        self._lock = threading.Lock()
        self._pending: tuple[int, list[Hashable], list[str]] | None = None
        #: batch id -> the last replay's verdict on it
        self.evidence: dict[Hashable, Evidence] = {}

    def request(self, step: int, batches: list[object], reason: str) -> None:
        """See :meth:`tensortap.healing.Rollback.request`."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise InvalidConfigError(f"Rollback.request: step must be an int >= 0, got {step!r}")
        given: object = batches  # the seam is typed; callers may still pass anything
        if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
            raise InvalidConfigError(
                f"Rollback.request: batches must be a list of batch ids, got {batches!r}"
            )
        ids = list(given)
        for bid in ids:
            if not isinstance(bid, Hashable):
                raise InvalidConfigError(
                    f"Rollback.request: a batch id must be hashable (an int, a str), got {bid!r}"
                )
        with self._lock:
            if self._pending is None:
                self._pending = (step, ids, [str(reason)])
            else:
                old_step, old_ids, reasons = self._pending
                self._pending = (min(old_step, step), old_ids + ids, [*reasons, str(reason)])

    @property
    def pending(self) -> bool:
        """Whether a request waits (a rule's request in the job's file counts once seen)."""
        self._poll()
        with self._lock:
            return self._pending is not None

    def take(self) -> Request:
        """This rank's request (``step`` None: none), with the evidence heard so far."""
        self._poll()
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return Request(None, [], "", dict(self.evidence))
        step, ids, reasons = pending
        return Request(step, ids, "; ".join(dict.fromkeys(reasons)), dict(self.evidence))

    def heard(self, kind: str, step: int, batch: Any, layer: Any, message: str, rank: int) -> None:
        """A replay's verdict on the step that trained ``batch`` (each micro-batch of it)."""
        named = flatten([batch]) if isinstance(batch, MicroBatches) else [batch]
        for one in named:
            if one is None or not isinstance(one, Hashable):
                continue
            self.evidence.pop(one, None)  # the newest last (pruned oldest first)
            self.evidence[one] = Evidence(kind, step, one, layer, message, rank)
        while len(self.evidence) > _KEEP_EVIDENCE:
            self.evidence.pop(next(iter(self.evidence)))

    def _poll(self) -> None:
        """Take a rule's request from the job's request file, when there is one."""
        if self._requests is not None:
            doc = self._requests.take()
            if doc is not None:
                self._from_rule(doc)

    def _from_rule(self, doc: dict[str, Any]) -> None:
        step = doc.get("mode_step") if doc.get("mode") in (None, "TRAIN") else None
        step = doc.get("step") if not isinstance(step, int) else step
        if not isinstance(step, int) or step < 0:
            logger.error("tensortap: a rollback request without a step was ignored: %r", doc)
            return
        given = doc.get("batches")
        batches: list[Any] = given if isinstance(given, list) else []
        reason = str(doc.get("reason") or f"rule {doc.get('rule', '?')} fired")
        self.request(step, [b for b in batches if isinstance(b, (int, str))], reason)


def agree(mine: Request, group: Any = None) -> tuple[Request | None, int]:
    """Every rank's request merged (the earliest step, all batches, every rank's evidence: the
    gravest for a batch), on every rank, and the number of ranks: one all-reduce of a flag at
    each boundary, and a gather of JSON only when some rank has a request; so every rank
    decides alike. None: no rank has one."""
    found = control_group(group)
    if found is None:
        return (mine if mine.step is not None else None), 1
    group, world = found
    if not any_flag(mine.step is not None, group):
        return None, world
    own = mine.to_doc()
    docs = gather_documents(own, group)
    requests = [mine if d is own else Request.from_doc(d, r) for r, d in enumerate(docs)]
    asked = [r for r in requests if r.step is not None]
    step = min(r.step for r in asked if r.step is not None)
    ids = list(dict.fromkeys(b for r in asked for b in r.ids))
    reason = "; ".join(dict.fromkeys(r.reason for r in asked))
    evidence: dict[Hashable, Evidence] = {}
    for r in requests:
        for batch, seen in r.evidence.items():
            held = evidence.get(batch)
            if held is None or _gravity(seen.kind) < _gravity(held.kind):
                evidence[batch] = seen
    return Request(step, ids, reason, evidence), world


def _gravity(kind: str) -> int:
    return _GRAVITY.index(kind) if kind in _GRAVITY else len(_GRAVITY)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _id_doc(batch: Any) -> Any:
    """A batch id as a JSON value (:func:`_id_of` reads it back)."""
    if batch is None or isinstance(batch, (bool, int, str)):
        return batch
    if isinstance(batch, float) and batch == batch and abs(batch) != float("inf"):
        return batch
    if isinstance(batch, TrainedAt):
        return {"trained_at": batch.step}
    if isinstance(batch, MicroBatches):
        return {"micro": [_id_doc(b) for b in batch]}
    if isinstance(batch, tuple):
        return {"tuple": [_id_doc(b) for b in batch]}
    return {"repr": repr(batch)}


def _id_of(doc: Any, where: str) -> Hashable:
    if doc is None or isinstance(doc, (bool, int, str, float)):
        return doc
    if isinstance(doc, dict) and len(doc) == 1:
        ((tag, value),) = doc.items()
        if tag == "trained_at" and _is_int(value):
            return TrainedAt(value)
        if tag in ("micro", "tuple") and isinstance(value, list):
            items = tuple(_id_of(v, where) for v in value)
            return MicroBatches(items) if tag == "micro" else items
        if tag == "repr" and isinstance(value, str):
            return value
    raise FormatError(
        f"{where}: a batch id must be a number, a string, or one of trained_at, micro, tuple, "
        f"repr; got {doc!r}"
    )
