"""Checkpoints never poisoned: a save is refused while the weights are not finite or the guard
is tripping, the last good checkpoint is pinned against the trainer's rotation until the guard
clears, and a checkpoint is checked (complete, finite) before it is loaded, falling back to the
next older good one.

:class:`CheckpointGuard` makes those decisions; the trainers' adapters act on them
(:mod:`tensortap.huggingface._checkpoint_guard`, :mod:`tensortap.lightning._checkpoint_guard`,
:class:`GuardedCheckpoints` for :class:`~tensortap.pytorch.Rollback`'s catalogue). Each
refusal, pin, release and fallback is a :class:`CheckpointEvent` in :attr:`CheckpointGuard.events`,
a log line, and, inside a job, a line of the job's events.

A refused save is *refused*, not quarantined: nothing is written, so a trainer's rotation
(which runs after a save) deletes nothing either, and no file that looks like a checkpoint
holds NaN weights for a later resume to pick up.

The saves a script makes itself are decided the same way: :meth:`CheckpointGuard.save` in a
plain loop (``torch.save`` itself is left alone: nothing tells a checkpoint from any other
object it writes), and the trainers' ``save_model`` / ``save_checkpoint`` through
:meth:`CheckpointGuard.judge_own`.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from tensortap.core._rollback_request import record_event
from tensortap.exceptions import CheckpointError, InvalidConfigError
from tensortap.healing._agreement import rank
from tensortap.hook._config import JOB_ENV
from tensortap.pytorch._checkpoints import Checkpoints, any_rank
from tensortap.pytorch._guard import Guard
from tensortap.pytorch._nonfinite import nonfinite_name

logger = logging.getLogger(__name__)

#: The kinds of :class:`CheckpointEvent`.
REFUSED, PINNED, RELEASED, KEPT, FALLBACK = "refused", "pinned", "released", "kept", "fallback"
#: A resume that was given a better checkpoint than the one asked for (or a warning naming it).
RESUMED = "resumed"


@dataclass(frozen=True)
class CheckpointEvent:
    """A save refused (``"refused"``), the last good checkpoint pinned (``"pinned"``) or
    released once the guard cleared (``"released"``), a pinned checkpoint kept from the
    rotation (``"kept"``), or a checkpoint not loaded because it was damaged or not finite
    (``"fallback"``: an older one was tried)."""

    kind: str
    #: The step of the save refused, or of the checkpoint pinned, kept or passed over.
    step: int | None
    #: Where the checkpoint is (a path, or None where it was never written).
    checkpoint: str | None
    reason: str
    message: str


class CheckpointGuard:
    """Decides whether a checkpoint may be saved now and which one is pinned.

    ``model``: the module whose parameters and buffers must be finite in a checkpoint (a
    trainer's callback passes its model when it has none). ``guard``: a
    :class:`~tensortap.pytorch.Guard`; while it is *tripping* (a trip among its last
    ``clear_after`` steps read), saves are refused and the last good checkpoint stays pinned.
    """

    def __init__(
        self,
        model: torch.nn.Module | None = None,
        *,
        guard: Guard | None = None,
        clear_after: int = 10,
    ) -> None:
        if model is not None and not isinstance(model, torch.nn.Module):
            raise InvalidConfigError(
                f"CheckpointGuard: model must be a torch.nn.Module, got {type(model).__name__}"
            )
        if guard is not None and not isinstance(guard, Guard):
            raise InvalidConfigError(
                f"CheckpointGuard: guard must be a tensortap.pytorch.Guard, got {guard!r}"
            )
        if isinstance(clear_after, bool) or not isinstance(clear_after, int) or clear_after < 1:
            raise InvalidConfigError(
                f"CheckpointGuard: clear_after must be an int >= 1 (steps without a trip), got "
                f"{clear_after!r}"
            )
        self.model, self.guard, self.clear_after = model, guard, clear_after
        #: Every refusal, pin, release, keep and fallback, in order.
        self.events: list[CheckpointEvent] = []
        #: The last checkpoint saved while all was well: (step, where), or None (the step is
        #: None for a :meth:`save` not told its step).
        self.last_good: tuple[int | None, str | None] | None = None
        #: The checkpoint pinned against the rotation (while a save is refused), or None.
        self.pinned: tuple[int | None, str | None] | None = None
        self._job_dir = os.environ.get(JOB_ENV) or None

    # -- saving --
    def refusal(self, model: torch.nn.Module | None = None) -> str | None:
        """Why a checkpoint must not be saved now (the weights are not finite, or the guard is
        tripping), or None when it may."""
        target = model if model is not None else self.model
        if target is not None:
            bad = nonfinite_name(target.state_dict())
            if bad is not None:
                return f"the weights are not finite ({bad})"
        return self._tripping()

    def checked_refusal(self, model: torch.nn.Module | None = None) -> str | None:
        """:meth:`refusal`, or None with a warning when the check itself fails: a guard that
        breaks lets the save through, and never stops training."""
        try:
            return self.refusal(model)
        except Exception as exc:
            logger.warning(
                "tensortap: the checkpoint guard's check failed, the save goes on unchecked: %r",
                exc,
            )
            return None

    def allow_save(self, step: int, model: torch.nn.Module | None = None) -> bool:
        """Whether the checkpoint of ``step`` may be saved now. A refusal is an event (and
        pins the last good checkpoint); the first save allowed after refusals releases the
        pin. Never raises for what the model holds."""
        return self.judge(step, self.refusal(model))

    def judge(self, step: int, reason: str | None) -> bool:
        """:meth:`allow_save` for a refusal found already (``reason``; None: allowed), as
        the ranks agreed it."""
        if reason is None:
            self._release(step)
            return True
        self._refuse(
            step,
            reason,
            f"the checkpoint of step {step} was not saved: {reason}; training goes on"
            + (f", and {_called(self.last_good)} is kept" if self.last_good is not None else ""),
        )
        return False

    def judge_own(self, what: str, where: str | None, step: int | None, reason: str | None) -> bool:
        """:meth:`judge` for a save the script makes itself (``what``, as the script wrote it:
        ``trainer.save_model('final')``) to ``where``: refused (``reason``), it is an event
        whose message says what was refused, why, that nothing was written, and where the
        last good checkpoint is; allowed, it releases a pin (the caller notes the save made
        with :meth:`saved`)."""
        if reason is None:
            self._release(step)
            return True
        kept = (
            f"the file there is left as it was ({where})"
            if where is not None and os.path.lexists(where)
            else "nothing was written"
        )
        last = (
            f"the last good one is {_called(self.last_good, where=True)}"
            if self.last_good is not None
            else "no good checkpoint was saved before it"
        )
        at = f" at step {step}" if step is not None else ""
        self._refuse(
            step, reason, f"{what}{at} was refused: {reason}; {kept}; {last}; training goes on"
        )
        return False

    def is_good(self, state: Any = None) -> bool:
        """Whether a checkpoint of ``state`` (a state dict, or any dict or list of tensors; a
        module: its ``state_dict()``; None: the guard's model) may be saved now: every tensor
        finite and the guard not tripping. No event: :meth:`save` makes one."""
        return self._state_refusal(state) is None

    def save(self, obj: Any, path: str | os.PathLike[str], *, step: int | None = None) -> bool:
        """``torch.save(obj, path)`` unless ``obj`` holds a tensor that is not finite or the
        guard is tripping: then nothing is written (the file already at ``path`` is left as
        it was) and the refusal is an event and a warning naming the last good checkpoint.
        Returns whether it was written. The file is written beside ``path`` and renamed over
        it (a crash mid-save leaves the previous one whole), with the same bytes as
        ``torch.save(obj, path)``. ``step``: the step it is of (said in events). No
        collective: call it where the loop calls ``torch.save`` (rank 0 alone is fine)."""
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidConfigError(
                f"CheckpointGuard.save: path must be a file path (str or os.PathLike), got "
                f"{type(path).__name__}; for a buffer, check first with is_good(obj), then "
                "torch.save(obj, buffer)"
            )
        where = os.fspath(path)
        try:
            reason = self._state_refusal(obj)
        except Exception as exc:  # a check that fails never stops the save
            logger.warning("tensortap: %s was saved unchecked: %r", where, exc)
            reason = None
        if not self.judge_own(f"the save to {where}", where, step, reason):
            return False
        _atomic_torch_save(obj, where)
        self.saved(step, where)
        return True

    def _state_refusal(self, state: Any) -> str | None:
        if state is None:
            return self.refusal()
        if isinstance(state, torch.nn.Module):
            return self.refusal(state)
        bad = nonfinite_name(state if isinstance(state, Mapping) else {"": state})
        if bad is not None:
            return f"the weights are not finite ({bad})"
        return self._tripping()

    def _release(self, step: int | None) -> None:
        if self.pinned is None:
            return
        pinned, self.pinned = self.pinned, None
        at = f" at step {step}" if step is not None else ""
        self._event(
            RELEASED,
            pinned[0],
            pinned[1],
            "the guard cleared and the weights are finite",
            f"{_called(pinned)} is no longer pinned: a save is allowed again{at}",
        )

    def _refuse(self, step: int | None, reason: str, message: str) -> None:
        self._event(REFUSED, step, None, reason, message)
        if self.pinned is None and self.last_good is not None:
            self.pinned = self.last_good
            self._event(
                PINNED,
                self.last_good[0],
                self.last_good[1],
                reason,
                f"{_called(self.last_good)} is pinned: the rotation keeps it until the guard "
                "clears",
            )

    def saved(self, step: int | None, where: str | None = None) -> None:
        """The checkpoint of ``step`` was saved (at ``where``) while all was well."""
        self.last_good = (step, where)

    def keeps(self, where: str | None, step: int | None = None) -> bool:
        """Whether the rotation must keep the checkpoint at ``where`` (of ``step``): it is the
        pinned one, or another file of the pinned step (Lightning's ``last.ckpt`` beside its
        top-k file); an event says it was kept."""
        pinned = self.pinned
        if pinned is None:
            return False
        same = (where is not None and pinned[1] is not None and _same(where, pinned[1])) or (
            step is not None and step == pinned[0]
        )
        if same:
            self._event(
                KEPT,
                pinned[0],
                pinned[1],
                "pinned",
                f"the rotation would have deleted {_called(pinned)}, the last good one; it is "
                "kept until the guard clears",
            )
        return same

    # -- loading --
    def newest_good(
        self, candidates: Iterable[tuple[int, str]], verify: Callable[[str], str | None]
    ) -> tuple[int, str] | None:
        """The newest of ``candidates`` (``(step, where)``) that ``verify`` finds sound
        (``verify(where)`` says what is wrong, or None); each one passed over is a
        ``"fallback"`` event. None when none is sound."""
        for step, where in sorted(candidates, reverse=True):
            problem = verify(where)
            if problem is None:
                return step, where
            self.passed_over(step, where, problem)
        return None

    def passed_over(self, step: int, where: str | None, problem: str) -> None:
        """The checkpoint of ``step`` was not loaded because of ``problem``: an event."""
        self._event(
            FALLBACK,
            step,
            where,
            problem,
            f"the checkpoint of step {step} was not loaded: {problem}; an older one is tried",
        )

    def resumed(self, step: int | None, where: str | None, message: str) -> None:
        """A resume was sent to (or told of) the good checkpoint at ``where``: an event."""
        self._event(RESUMED, step, where, "the checkpoint asked for is not sound", message)

    # -- inside --
    def _tripping(self) -> str | None:
        guard = self.guard
        if guard is None:
            return None
        history = guard.history()
        if not history:
            return None
        latest = history[-1].step
        trips = [r.step for r in history if r.tripped and r.step > latest - self.clear_after]
        if not trips:
            return None
        return (
            f"the guard is tripping (a trip at step {trips[-1]}, within the last "
            f"{self.clear_after} steps)"
        )

    def _event(self, kind: str, step: int | None, where: str | None, reason: str, msg: str) -> None:
        self.events.append(CheckpointEvent(kind, step, where, reason, msg))
        (logger.info if kind in (RELEASED, KEPT, RESUMED) else logger.warning)("tensortap: %s", msg)
        if self._job_dir is not None:
            try:
                record_event(
                    self._job_dir,
                    f"checkpoint_{kind}",
                    step=step,
                    checkpoint=where,
                    reason=reason,
                    message=msg,
                    rank=rank(),  # each rank records the saves refused alike on all of them
                )
            except OSError as exc:
                logger.warning("tensortap: could not record a checkpoint event: %s", exc)


class GuardedCheckpoints:
    """A :class:`~tensortap.pytorch._checkpoints.Checkpoints` catalogue (for
    :class:`~tensortap.pytorch.Rollback` in a plain loop) whose saves a :class:`CheckpointGuard`
    decides: a refused save writes nothing (an event, no exception), ``keep_last_n`` keeps
    the newest checkpoints and forgets older ones (never the pinned one), and a load is
    checked for finite weights (a checkpoint whose weights are not finite raises
    :class:`~tensortap.exceptions.CheckpointError`: the rollback tries an older one).

    ``checkpoints``: a :class:`~tensortap.pytorch.DistributedCheckpoints` (which checks its
    files and the finiteness of what it read before any weight changes) or a
    :class:`~tensortap.pytorch.FunctionCheckpoints` (whose ``load`` changes the weights in
    place: they are checked after it, and the older checkpoint the rollback then loads
    replaces them whole). ``remove``: called with the step of each checkpoint forgotten by
    ``keep_last_n`` (delete its files there; :class:`DistributedCheckpoints` deletes its own).
    """

    def __init__(
        self,
        checkpoints: Checkpoints,
        guard: CheckpointGuard,
        *,
        keep_last_n: int | None = None,
        remove: Callable[[int], object] | None = None,
    ) -> None:
        if not isinstance(checkpoints, Checkpoints):
            raise InvalidConfigError(
                "GuardedCheckpoints needs checkpoints with save, load, steps and forget (a "
                f"FunctionCheckpoints or DistributedCheckpoints), got {type(checkpoints).__name__}"
            )
        if not isinstance(guard, CheckpointGuard):
            raise InvalidConfigError(
                f"GuardedCheckpoints needs a CheckpointGuard, got {type(guard).__name__}"
            )
        if keep_last_n is not None and (
            isinstance(keep_last_n, bool) or not isinstance(keep_last_n, int) or keep_last_n < 1
        ):
            raise InvalidConfigError(
                f"GuardedCheckpoints: keep_last_n must be None or an int >= 1, got {keep_last_n!r}"
            )
        self.checkpoints, self.guard = checkpoints, guard
        self.keep_last_n, self._remove = keep_last_n, remove

    def save(self, step: int, extra: dict[str, Any]) -> None:
        # the ranks agree: a save is collective, and a rank left out of it would hang the rest
        if not self.guard.judge(step, any_rank(self.guard.checked_refusal())):
            return
        self.checkpoints.save(step, extra)
        self.guard.saved(step, self._where(step))
        self._rotate()

    def load(self, step: int) -> dict[str, Any]:
        extra = self.checkpoints.load(step)
        model = self.guard.model
        bad = any_rank(None if model is None else nonfinite_name(model.state_dict()))
        if bad is not None:
            problem = f"its weights are not finite ({bad})"
            self.guard.passed_over(step, self._where(step), problem)
            raise CheckpointError(f"the checkpoint of step {step} was not restored: {problem}")
        return extra

    def steps(self) -> list[int]:
        return self.checkpoints.steps()

    def forget(self, step: int) -> None:
        self.checkpoints.forget(step)

    def _where(self, step: int) -> str | None:
        path = getattr(self.checkpoints, "path", None)
        return str(path(step)) if callable(path) else None

    def _rotate(self) -> None:
        if self.keep_last_n is None:
            return
        steps = self.checkpoints.steps()
        for step in steps[: max(0, len(steps) - self.keep_last_n)]:
            if self.guard.keeps(self._where(step), step):
                continue
            self.checkpoints.forget(step)
            remover = self._remove or getattr(self.checkpoints, "remove", None)
            if callable(remover):
                try:
                    remover(step)
                except OSError as exc:
                    logger.warning("tensortap: the checkpoint of step %d stays: %s", step, exc)


def _called(entry: tuple[int | None, str | None], *, where: bool = False) -> str:
    """How a message names the checkpoint ``entry`` (``(step, where)``)."""
    step, path = entry
    if step is None:
        return f"the checkpoint at {path}"
    return f"the checkpoint of step {step}" + (f" ({path})" if where and path else "")


def _atomic_torch_save(obj: Any, path: str) -> None:
    """``torch.save(obj, path)``, written in a fresh folder beside ``path`` under the same file
    name (torch names the archive's records after it: the bytes are those of a direct save),
    then renamed over ``path``."""
    folder = tempfile.mkdtemp(prefix=".tensortap-save-", dir=os.path.dirname(path) or ".")
    try:
        staged = os.path.join(folder, os.path.basename(path))
        torch.save(obj, staged)
        os.replace(staged, path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _same(a: str, b: str) -> bool:
    return os.path.normpath(os.path.abspath(a)) == os.path.normpath(os.path.abspath(b))
