"""Roll training back to its last good checkpoint, skip the batches that broke it, and go on as
a branch of the run.

``request(step, batches, reason)`` is the one way in: a loss check of the loop's own, the guard
when its skip budget says so, or a rule's rollback action (through the job's request file, see
:mod:`tensortap.core._rollback_request`). It only records the request, from any thread; the
training thread acts on it at the next step boundary (:meth:`Rollback.restore`, which
:meth:`Rollback.steps` calls for you):

1. the request is agreed by every rank (one host-side collective on a gloo group, at each
   boundary, when ``torch.distributed`` runs more than one process; a gather of JSON, never a
   pickle, when some rank has one: :mod:`tensortap.healing._requests`): the earliest bad step
   and every rank's batches;
2. the last good checkpoint is the newest one at or before ``step - margin`` (a checkpoint of
   step ``s`` holds the state *before* step ``s`` trains; the default ``margin=1`` leaves out
   the checkpoint of the bad step itself, whose weights already produced a bad loss when a loss
   check names the step);
3. the budget is asked: at most ``max_rollbacks`` per run, and never the same checkpoint again
   without a new batch to skip (that would replay the same steps): otherwise the run stops with
   a ``refused`` event;
4. the checkpoint is loaded, the batches join the skip list of the batch stream
   (:class:`~tensortap.pytorch.SkipBatches`), the stream goes back to where the checkpoint took
   it, and checkpoints newer than it (of the abandoned branch) are forgotten;
5. the hook's session ends and a new one starts, recorded as a branch of the first at the
   restored step (:meth:`tensortap.hook._hook.Hook.branch_from`), so the trial and the dashboard
   show the resumed run as a fork.

Before step 2, the evidence is heard: a :class:`~tensortap.pytorch.Replayer` that follows the
rollback hands it each attribution (:meth:`Rollback.attributed`), and the request is decided by
:func:`tensortap.core._rollback_decision.decide`: a data fault is restored and its batches left
out as above; a transient one goes on with every batch (counted per rank, the rank named after
``transient_limit``); a numerics one restores without dropping data and tries ``remedies``,
then stops naming the layer; a reproducible one stops at once. Each decision is recorded.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from tensortap.core._rollback_decision import (
    GO_ON,
    REMEDY,
    STOP,
    TRANSIENT,
    Decision,
    RemedyPlan,
    decide,
)
from tensortap.core._rollback_request import REQUEST_FILE, RollbackRequests, record_event
from tensortap.exceptions import CheckpointError, InvalidConfigError
from tensortap.healing._agreement import rank as _rank
from tensortap.healing._budget import TrainedAt, flatten
from tensortap.healing._checkpoints import Checkpoints
from tensortap.healing._loop import drive
from tensortap.healing._requests import Inbox, agree
from tensortap.healing._sessions import Sessions
from tensortap.healing._skip_batches import SkipBatches
from tensortap.hook._config import JOB_ENV
from tensortap.hook._hook import Hook

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RollbackEvent:
    """A rollback done (``kind="rollback"``) or refused by the budget (``"refused"``); a
    checkpoint that could not be saved (``"save_failed"``: training went on without it) or
    could not be loaded (``"damaged"``: nothing was restored from it, an older one was tried).
    Decided from a replay's evidence: ``"went_on"`` (transient: nothing restored, nothing
    left out), ``"stopped"`` (numerics with no remedy left, or reproducible: training ends),
    ``"suspect_rank"`` (a rank with ``transient_limit`` transient faults)."""

    kind: str
    #: The first bad step the request named.
    step: int
    #: The checkpoint's step training went back to (None when refused).
    restored_step: int | None
    batches: tuple[Hashable, ...]
    reason: str
    message: str
    #: The new session (a branch of ``parent``); None when refused or without a hook.
    session: str | None = None
    parent: str | None = None
    #: What the request was decided as, and why (None for events that decide nothing).
    decision: Decision | None = None


class Rollback:
    """Restore the last good checkpoint on request, skip the bad batches, and go on as a branch.

    ``checkpoints``: a :class:`~tensortap.pytorch.FunctionCheckpoints`, a
    :class:`~tensortap.pytorch.DistributedCheckpoints` or your own
    :class:`~tensortap.pytorch._checkpoints.Checkpoints`. ``every``: :meth:`steps` saves a
    checkpoint at every ``every``-th step (step 0 included; not needed where a trainer saves
    them, as with :mod:`tensortap.lightning`'s rollback). ``batches``: the
    :class:`SkipBatches` the loop reads. ``make_hook``: a function that makes (and registers)
    the hook, called at once and again after each rollback, as each resumed run is a new
    writing session (:attr:`hook` is the current one; without it, a trainer's callback hands
    its hook over: :meth:`follow_hook`). ``requests``: the request file a rule's rollback
    action writes, or a :class:`~tensortap.core._rollback_request.RollbackRequests` watching it
    (default: the one of the job the process runs in, if any). ``group``: the
    process group the ranks agree on requests through, as JSON (default, when
    ``torch.distributed`` runs more than one process: the default group if it is gloo, else
    one gloo group; see :mod:`tensortap.healing._agreement`). ``remedies``: a
    :class:`~tensortap.core._rollback_decision.RemedyPlan` (PyTorch's
    :class:`~tensortap.pytorch.Remedies`) tried, in order, when a replay says a step went
    non-finite from finite data (without it, such a fault stops training at once).
    ``transient_limit``: transient faults on one rank before it is named as suspect.
    """

    def __init__(
        self,
        checkpoints: Checkpoints,
        *,
        every: int | None = None,
        batches: SkipBatches[Any] | None = None,
        make_hook: Callable[[], Hook] | None = None,
        margin: int = 1,
        max_rollbacks: int = 3,
        requests: str | os.PathLike[str] | RollbackRequests | None = None,
        group: Any = None,
        remedies: RemedyPlan | None = None,
        transient_limit: int = 3,
    ) -> None:
        if not isinstance(checkpoints, Checkpoints):
            raise InvalidConfigError(
                "Rollback needs checkpoints with save, load, steps and forget (a "
                "FunctionCheckpoints or DistributedCheckpoints), got "
                f"{type(checkpoints).__name__}"
            )
        for name, value, least in (
            ("every", 1 if every is None else every, 1),
            ("margin", margin, 0),
            ("max_rollbacks", max_rollbacks, 0),
            ("transient_limit", transient_limit, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise InvalidConfigError(
                    f"Rollback: {name} must be an int >= {least}, got {value!r}"
                )
        if batches is not None and not isinstance(batches, SkipBatches):
            raise InvalidConfigError(
                "Rollback: batches must be a SkipBatches (wrap your DataLoader: "
                f"SkipBatches(loader)), got {type(batches).__name__}"
            )
        if make_hook is not None and not callable(make_hook):
            raise InvalidConfigError(
                "Rollback: make_hook must be a function that makes the hook (each resumed run "
                f"is a new session, with a new hook), got {make_hook!r}"
            )
        if remedies is not None and not isinstance(remedies, RemedyPlan):
            raise InvalidConfigError(
                "Rollback: remedies must be a Remedies (tensortap.pytorch.Remedies(optimizer)), "
                "got "
                f"{type(remedies).__name__}"
            )
        self.remedies, self.transient_limit = remedies, transient_limit
        self._tried: list[str] = []  # the remedies tried for the fault at hand
        self._remedied = 0  # the step whose fault the last remedy was for
        #: Transient faults heard of, per rank.
        self.transients: dict[int, int] = {}
        self.checkpoints = checkpoints
        self.every, self.margin, self.max_rollbacks = every, margin, max_rollbacks
        self.batches = batches
        self._sessions = Sessions(make_hook)
        self._job_dir = os.environ.get(JOB_ENV) or None  # its events show what was done
        if requests is None and self._job_dir is not None:
            requests = os.path.join(self._job_dir, REQUEST_FILE)
        if requests is not None and not isinstance(requests, RollbackRequests):
            requests = RollbackRequests(requests)
        self._inbox = Inbox(requests)
        self._group = group
        self._world = 1
        self._trained: dict[int, Hashable] = {}  # step -> the batch it trained, since a checkpoint
        self._last: tuple[int, int] | None = None  # (restored step, bad step) of the last rollback
        #: Every rollback done or refused, in order.
        self.events: list[RollbackEvent] = []
        #: True once the budget refused a rollback: the run should end (:meth:`steps` does).
        self.should_stop = False
        self._before_restore: list[Callable[[], Any]] = []

    # -- the seam --
    def request(self, step: int, batches: list[object], reason: str) -> None:
        """Ask for a rollback: ``step`` went bad, ``batches`` (the ids of the batches that
        made it so; empty: the batch trained at ``step``) are to be skipped. Safe from any
        thread; acted on at the next step boundary. Requests before then are merged (the
        earliest step, every batch)."""
        self._inbox.request(step, batches, reason)

    @property
    def pending(self) -> bool:
        """Whether a request waits for the next step boundary (on this rank; a rule's request
        in the job's file counts once it is seen)."""
        return self._inbox.pending

    @property
    def rollbacks(self) -> int:
        """How many rollbacks were done."""
        return sum(e.kind == "rollback" for e in self.events)

    # -- the loop --
    def steps(self, total_steps: int, start: int = 0) -> Iterator[tuple[int, Hashable, Any]]:
        """Drive a training loop: yields ``(step, batch_id, batch)`` from :attr:`batches` until
        ``total_steps``, saving a checkpoint every :attr:`every` steps and, at each boundary,
        acting on a request (the steps start again after the restored checkpoint). Passes over
        the data follow one another. Ends early when the budget refused a rollback."""
        if self.batches is None or self.every is None:
            raise InvalidConfigError(
                "Rollback.steps needs batches= (a SkipBatches) and every= (steps between "
                f"checkpoints), got batches={self.batches!r}, every={self.every!r}"
            )
        for name, value in (("total_steps", total_steps), ("start", start)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidConfigError(
                    f"Rollback.steps: {name} must be an int >= 0 (a number of optimizer steps), "
                    f"got {type(value).__name__} {value!r}; pass int({value!r}) if it is a "
                    "number read from a config"
                )
        return drive(self, self.batches, self.every, total_steps, start)

    def checkpoint(self, step: int) -> None:
        """Save the checkpoint of ``step`` (the state before step ``step`` trains), with where
        the batch stream is."""
        extra: dict[str, Any] = {}
        if self.batches is not None:
            extra["batches"] = self.batches.state_dict()
        try:
            self.checkpoints.save(step, extra)
        except (CheckpointError, OSError) as exc:  # the disk is full: an event, not a crash
            message = (
                f"the checkpoint of step {step} was not saved ({exc}); training goes on, and a "
                "rollback uses an older checkpoint"
            )
            logger.error("tensortap: %s", message)
            self.events.append(RollbackEvent("save_failed", step, None, (), str(exc), message))
            self._tell_job("checkpoint_failed", step=step, message=message)
            return
        self._sessions.note(step)
        self._prune(min(self.checkpoints.steps(), default=step))  # a refused save adds none

    def trained(self, step: int, batch_id: Hashable) -> None:
        """Step ``step`` trains the batch ``batch_id`` (:meth:`steps` says so itself; a
        trainer's callback calls it; a step that accumulates several: a
        :class:`~tensortap.healing._budget.MicroBatches` of their ids): a request naming the
        step alone skips that batch (each of them)."""
        self._trained[step] = batch_id
        self._sessions.note(step)
        if len(self._trained) > _KEEP_STEPS:  # where no checkpoint() prunes (a trainer saves)
            self._prune(min(self.checkpoints.steps(), default=step))

    def _prune(self, oldest: int) -> None:
        self._trained = {s: b for s, b in self._trained.items() if s >= oldest}
        self._sessions.prune(oldest)

    @property
    def hook(self) -> Hook | None:
        """The current hook (None until ``make_hook`` or :meth:`follow_hook` gives one)."""
        return self._sessions.hook

    def follow_hook(self, hook: Hook) -> None:
        """The hook of the run from now on (one a trainer's callback made). When a rollback
        waits for its branch to be recorded, this hook's session is that branch."""
        branched = self._sessions.follow(hook)
        if branched is not None and self.events and self.events[-1].kind == "rollback":
            parent, session = branched
            self.events[-1] = replace(self.events[-1], session=session, parent=parent)

    def attributed(self, attribution: Any) -> None:
        """What a replay said about a step (a :class:`~tensortap.pytorch.Attribution`: its
        ``kind``, ``step``, ``batch`` and ``first_bad_layer``): heard when a request naming
        that batch is decided. A replayer that follows this rollback calls it for you. A
        transient fault is counted for this rank; at ``transient_limit`` the rank is named."""
        kind, batch = getattr(attribution, "kind", None), getattr(attribution, "batch", None)
        step = getattr(attribution, "step", None)
        if not isinstance(kind, str) or not isinstance(step, int):
            raise InvalidConfigError(
                "Rollback.attributed needs an attribution by replay (with kind and step), got "
                f"{attribution!r}"
            )
        rank = _rank()
        layer = getattr(attribution, "first_bad_layer", None)
        message = str(getattr(attribution, "message", ""))
        self._inbox.heard(kind, step, batch, layer, message, rank)
        if kind != TRANSIENT:
            return
        count = self.transients[rank] = self.transients.get(rank, 0) + 1
        if count != self.transient_limit:
            return
        message = (
            f"rank {rank} had {count} transient faults (steps that replayed fine, the last at "
            f"step {step}): suspect its hardware (silent data corruption); no batch was left "
            "out for them"
        )
        logger.error("tensortap: %s", message)
        self.events.append(
            RollbackEvent("suspect_rank", step, None, (), f"{count} transient faults", message)
        )
        self._sessions.record("suspect_rank", {"rank": rank, "transients": count, "step": step})
        self._tell_job("suspect_rank", step=step, rank=rank, message=message)

    def register_before_restore(self, fn: Callable[[], Any]) -> None:
        """Call ``fn()`` at each step boundary, in :meth:`restore` before it acts on a request
        (while the weights are still the last step's). A replayer that follows the guard and
        this rollback (``replayer.follow(guard, rollback=rollback)``) registers its
        ``before_step`` here, so the trip that spends the skip budget is replayed before the
        checkpoint is loaded; an exception in ``fn`` is logged."""
        if not callable(fn):
            raise InvalidConfigError(
                f"Rollback.register_before_restore needs a function of no arguments, got {fn!r}"
            )
        if fn not in self._before_restore:
            self._before_restore.append(fn)

    def restore(self) -> int | None:
        """At a step boundary: act on the request, if one is pending (on any rank): returns
        the step to go on from (the restored checkpoint's), or None (no request, or the
        budget refused it and :attr:`should_stop` is set)."""
        for fn in self._before_restore:
            try:
                fn()
            except Exception:
                logger.exception("tensortap: a function called before restore failed")
        request, self._world = agree(self._inbox.take(), self._group)
        if request is None or request.step is None:
            return None
        step, ids, reason, evidence = request.step, request.ids, request.reason, request.evidence
        ids = [  # a guard told no batch ids: the batches trained at its steps
            self._trained.get(b.step) if isinstance(b, TrainedAt) else b for b in ids
        ]
        ids = [b for b in ids if b is not None]
        if not ids and step in self._trained:
            ids = [self._trained[step]]
        ids = flatten(ids)  # a step that accumulated micro-batches: each one's id
        ids = list(dict.fromkeys(ids))
        order = self.remedies.order if self.remedies is not None else ()
        if (
            self._tried
            and self.remedies is not None
            and step > self._remedied + self.remedies.steps
        ):
            self._tried = []  # past the last remedy's steps: a new fault starts from the first
        decision = decide(ids, evidence, remedies=order, tried=self._tried)
        if decision.action in (GO_ON, STOP):
            self._without_restore(step, ids, reason, decision)
            return None
        if decision.action != REMEDY:
            self._tried = []
        good = [s for s in self.checkpoints.steps() if s <= step - self.margin]
        skip = self.batches.skip if self.batches is not None else set()
        new_ids = [b for b in decision.drop if b not in skip]
        refusal = None
        if self.rollbacks >= self.max_rollbacks:
            refusal = f"the budget of {self.max_rollbacks} rollback(s) per run is spent"
        elif not good:
            refusal = (
                f"no checkpoint at or before step {step - self.margin} (step {step} minus the "
                f"margin of {self.margin}); checkpoints: {self.checkpoints.steps() or 'none'}"
            )
        elif (
            self._last is not None
            and self._last[0] == good[-1]
            and not new_ids
            and decision.action != REMEDY  # a new remedy is not the same steps again
        ):
            refusal = (
                f"it would restore the checkpoint of step {good[-1]} again with no new batch "
                "to skip, and replay the same steps"
            )
        loaded = None
        if refusal is None:
            loaded = self._load_intact(good, step)
            if loaded is None:
                refusal = (
                    f"no intact checkpoint at or before step {step - self.margin} (each one "
                    "tried was damaged: see the damaged events)"
                )
        if refusal is not None or loaded is None:
            message = f"rollback for step {step} refused: {refusal}; training stops ({reason})"
            logger.error("tensortap: %s", message)
            self.events.append(
                RollbackEvent(
                    "refused", step, None, tuple(ids), reason, message, None, None, decision
                )
            )
            self._tell_job("rollback_refused", step=step, message=message)
            self.should_stop = True
            return None
        target, extra = loaded
        for later in [s for s in self.checkpoints.steps() if s > target]:
            self.checkpoints.forget(later)
        if self.batches is not None:
            self.batches.skip.update(new_ids)
            if isinstance(extra.get("batches"), dict):
                self.batches.load_state_dict(extra["batches"])
        self._last = (target, step)
        remedy = ""
        if decision.action == REMEDY and self.remedies is not None and decision.remedy:
            remedy = f"; remedy: {self.remedies.apply(decision.remedy)}"
            self._tried.append(decision.remedy)
            self._remedied = step
        self._record_decision(step, decision)
        parent, session = self._sessions.branch(target, step, list(decision.drop), reason)
        message = (
            f"rolled back to the checkpoint of step {target} (step {step} went bad: {reason}); "
            f"skipping batch(es) {', '.join(map(str, new_ids)) or 'none new'}"
        )
        if decision.evidence is not None:
            message += f"; {decision.reason}{remedy}"
        logger.warning("tensortap: %s", message)
        self.events.append(
            RollbackEvent(
                "rollback", step, target, tuple(ids), reason, message, session, parent, decision
            )
        )
        self._tell_job("rollback", step=step, restored_step=target, message=message)
        return target

    def _without_restore(
        self, step: int, ids: list[Hashable], reason: str, decision: Decision
    ) -> None:
        """A decision that restores nothing: go on (transient), or stop (the evidence says a
        restore would not help)."""
        message = f"step {step} went bad ({reason}): {decision.reason}"
        kind = "went_on" if decision.action == GO_ON else "stopped"
        if decision.action == STOP:
            self.should_stop = True
            self._tried = []
            logger.error("tensortap: %s", message)
        else:
            logger.warning("tensortap: %s", message)
        self.events.append(
            RollbackEvent(kind, step, None, tuple(ids), reason, message, None, None, decision)
        )
        self._record_decision(step, decision)

    def _record_decision(self, step: int, decision: Decision) -> None:
        """Each decision is an event: of the session it was made in, and of the job."""
        fields = {"step": step, **decision.to_dict()}
        at = self._sessions.global_step(step)  # the bad step's global step, where known
        self._sessions.record("rollback_decision", {**fields, "at": at})
        self._tell_job("rollback_decision", **fields, message=f"step {step}: {decision.reason}")

    def _load_intact(self, good: list[int], step: int) -> tuple[int, dict[str, Any]] | None:
        """The newest of the ``good`` checkpoints that loads, and its extra; a damaged one
        (CheckpointError: nothing was restored from it) is an event and is forgotten."""
        for target in reversed(good):
            try:
                return target, self.checkpoints.load(target)
            except CheckpointError as exc:
                message = (
                    f"the checkpoint of step {target} was not restored: {exc}; trying an older one"
                )
                logger.error("tensortap: %s", message)
                self.events.append(RollbackEvent("damaged", step, target, (), str(exc), message))
                self._tell_job("checkpoint_damaged", step=step, checkpoint=target, message=message)
                self.checkpoints.forget(target)
        return None

    def close(self) -> None:
        """Close the current hook."""
        self._sessions.close()

    # -- inside --
    def _tell_job(self, kind: str, **fields: Any) -> None:
        """The job's events say what was done (once: by rank 0); never raises."""
        if self._job_dir is None or (self._world > 1 and _rank() != 0):
            return
        try:
            record_event(self._job_dir, kind, **fields)
        except OSError as exc:
            logger.warning("tensortap: could not record %s in the job's events: %s", kind, exc)


#: Steps whose batch is remembered before those older than the oldest checkpoint are pruned.
_KEEP_STEPS = 10_000
