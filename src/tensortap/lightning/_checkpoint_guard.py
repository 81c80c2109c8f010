"""Checkpoints never poisoned in Lightning's ``Trainer.fit()`` (see
:mod:`tensortap.pytorch._checkpoint_guard`)::

    from tensortap.lightning import GuardedModelCheckpoint, last_good_checkpoint

    checkpoint = GuardedModelCheckpoint("ckpts", every_n_train_steps=50, save_top_k=1)
    trainer = lightning.pytorch.Trainer(max_steps=1000, callbacks=[checkpoint])
    trainer.fit(module, ckpt_path=last_good_checkpoint("ckpts"))

:class:`GuardedModelCheckpoint` is Lightning's ``ModelCheckpoint`` (same arguments, plus
``checkpoint_guard=``) whose saves a :class:`~tensortap.pytorch.CheckpointGuard` decides: a
save while the module's weights are not finite, or while the guard is tripping, is refused
before anything is written or counted (no file, no ``best_k_models`` entry, no rotation), so
``save_top_k`` deletes nothing good; and the last good file is pinned: the rotation never
deletes it until a save is allowed again. Under DDP the ranks agree on a refusal (one
reduction per save). :func:`last_good_checkpoint` is the newest ``.ckpt`` that reads back
complete and finite (``torch.load(weights_only=True)``: no code runs from its bytes).

The script's own ``trainer.save_checkpoint(path)`` is decided by the same guard when the
Trainer holds a guarded ``ModelCheckpoint``: a save of non-finite weights, or one while the
guard trips, writes nothing (the file at ``path`` stays as it was), with an event and a
warning naming the last good checkpoint. ``Trainer.save_checkpoint`` is wrapped, once per
Trainer class, when a guarded callback is set up; the wrapper asks the Trainer's callbacks and
does nothing more for a Trainer without one.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from tensortap.exceptions import InvalidConfigError
from tensortap.lightning._checkpoint_names import step_of
from tensortap.pytorch._checkpoint_guard import CheckpointGuard
from tensortap.pytorch._checkpoints import any_rank
from tensortap.pytorch._nonfinite import nonfinite_name

logger = logging.getLogger(__name__)

_WRAPPED = "__tensortap_checkpoint_guard__"  # marks a Trainer's save_checkpoint once wrapped

if TYPE_CHECKING:
    _Base = ModelCheckpoint
else:
    _Base = object


class _GuardedSaves(_Base):
    """What :class:`GuardedModelCheckpoint` adds to a ``ModelCheckpoint`` (or to a subclass of
    it: :func:`guard_checkpoints` gives one made by a script these methods)."""

    checkpoint_guard: CheckpointGuard
    _decided: tuple[int, bool] | None
    _saving: bool  # inside its own save: the Trainer's save_checkpoint is decided already

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        try:
            guard_own_saves(type(trainer))
        except Exception as exc:  # never stop training for it
            logger.warning("tensortap: trainer.save_checkpoint() is not guarded: %r", exc)

    def _allowed(self, trainer: Any) -> bool:
        """Whether a save at this step may go on: decided once per step (top-k and last ask
        alike), agreed by every rank."""
        step = int(trainer.global_step)
        if self._decided is not None and self._decided[0] == step:
            return self._decided[1]
        allowed = self.checkpoint_guard.judge(step, self._refusal(trainer))
        self._decided = (step, allowed)
        return allowed

    def allowed_own(self, trainer: Any, filepath: Any) -> bool:
        """Whether the script's ``trainer.save_checkpoint(filepath)`` may go on: one decision
        (and on refusal one event) per call, agreed by every rank (each one calls it:
        Lightning waits for all of them at its end)."""
        where = os.fspath(filepath) if isinstance(filepath, (str, os.PathLike)) else None
        what = f"trainer.save_checkpoint({where!r})" if where else "trainer.save_checkpoint()"
        return self.checkpoint_guard.judge_own(
            what, where, int(trainer.global_step), self._refusal(trainer)
        )

    def _refusal(self, trainer: Any) -> str | None:
        module = trainer.lightning_module
        reason = self.checkpoint_guard.checked_refusal(
            module if isinstance(module, torch.nn.Module) else None
        )
        if trainer.world_size <= 1:
            return reason
        distributed = torch.distributed
        if distributed.is_available() and distributed.is_initialized():
            # the other ranks' own reasons, as the Hugging Face guard and GuardedCheckpoints
            # agree: the refusal names the rank and what it found (one gather, no pickle)
            return any_rank(reason)
        # a strategy outside torch.distributed (XLA): whether any rank refused, not why
        anyone = trainer.strategy.reduce_boolean_decision(reason is not None, all=False)
        if anyone and reason is None:
            reason = "another rank refused the save"
        return reason

    def _save_topk_checkpoint(self, trainer: Any, monitor_candidates: dict[str, Any]) -> None:
        if self._allowed(trainer):
            super()._save_topk_checkpoint(trainer, monitor_candidates)

    def _save_last_checkpoint(self, trainer: Any, monitor_candidates: dict[str, Any]) -> None:
        if self._allowed(trainer):
            super()._save_last_checkpoint(trainer, monitor_candidates)

    def _save_checkpoint(self, trainer: Any, filepath: str) -> None:
        self._saving = True
        try:
            super()._save_checkpoint(trainer, filepath)
        finally:
            self._saving = False
        self.checkpoint_guard.saved(int(trainer.global_step), filepath)

    def _remove_checkpoint(self, trainer: Any, filepath: str) -> None:
        if self.checkpoint_guard.keeps(filepath, step_of(os.path.basename(filepath))):
            return
        super()._remove_checkpoint(trainer, filepath)


class GuardedModelCheckpoint(_GuardedSaves, ModelCheckpoint):
    """``ModelCheckpoint`` whose saves are refused while the weights are not finite or the
    guard is tripping (an event each, never an exception), and whose rotation keeps the last
    good file while a save is refused."""

    def __init__(self, *args: Any, checkpoint_guard: CheckpointGuard | None = None, **kwargs: Any):
        ModelCheckpoint.__init__(self, *args, **kwargs)
        _arm(self, checkpoint_guard)


def guard_checkpoints(trainer: Any, guard: CheckpointGuard | None = None) -> list[Any]:
    """Give every ``ModelCheckpoint`` of ``trainer`` (Lightning's default one or the script's,
    of any subclass; of a ``lightning.pytorch`` or a ``pytorch_lightning`` Trainer)
    :class:`GuardedModelCheckpoint`'s decisions, in place: its class becomes a subclass of its
    own with the guard's methods and the same ``__qualname__`` (so its
    ``state_key``, and what it saves, stay as they were); the first one's guard decides the
    script's own ``trainer.save_checkpoint(path)`` too (:func:`guard_own_saves`). What
    ``tensortap run`` does to every Trainer. Returns the callbacks guarded."""
    guarded: list[Any] = []
    for callback in trainer.callbacks:
        if not isinstance(callback, _model_checkpoints()):
            continue
        if not isinstance(callback, _GuardedSaves):
            callback.__class__ = _guarded_class(type(callback))
            _arm(callback, guard)
        guarded.append(callback)
    guard_resume(trainer, guarded[0].checkpoint_guard if guarded else guard)
    return guarded


def guard_own_saves(trainer_class: type[Any]) -> None:
    """Wrap ``save_checkpoint`` of ``trainer_class`` (where its class hierarchy defines it;
    once) so that a Trainer holding a guarded ``ModelCheckpoint`` has its guard decide the
    script's own saves. The callback's own saves (decided already) go through as they were,
    and so does every call of a Trainer without a guarded callback. A check that fails lets
    the save through, with a warning."""
    owner = next(c for c in trainer_class.__mro__ if "save_checkpoint" in vars(c))
    original = vars(owner)["save_checkpoint"]
    if getattr(original, _WRAPPED, False):
        return

    @functools.wraps(original)
    def save_checkpoint(self: Any, filepath: Any, *args: Any, **kwargs: Any) -> Any:
        guarded = [c for c in self.callbacks if isinstance(c, _GuardedSaves)]
        if not guarded or any(getattr(c, "_saving", False) for c in guarded):
            return original(self, filepath, *args, **kwargs)
        callback = guarded[0]
        try:
            allowed = callback.allowed_own(self, filepath)
        except Exception as exc:  # a check that fails never stops the save
            logger.warning("tensortap: trainer.save_checkpoint() saved unchecked: %r", exc)
            return original(self, filepath, *args, **kwargs)
        if not allowed:
            return None  # nothing written: the file at filepath stays as it was
        done = original(self, filepath, *args, **kwargs)
        if isinstance(filepath, (str, os.PathLike)):
            callback.checkpoint_guard.saved(int(self.global_step), os.fspath(filepath))
        return done

    setattr(save_checkpoint, _WRAPPED, True)
    setattr(owner, "save_checkpoint", save_checkpoint)  # noqa: B010 - a class of any package


def _model_checkpoints() -> tuple[type[Any], ...]:
    """``ModelCheckpoint`` of ``lightning.pytorch`` and, when a script imported it, of the
    older ``pytorch_lightning`` spelling (a class of its own: each Trainer takes its own
    package's callbacks; their save and rotation methods are the same)."""
    classes: list[type[Any]] = [ModelCheckpoint]
    if "pytorch_lightning" in sys.modules:
        try:
            from pytorch_lightning.callbacks import ModelCheckpoint as PLModelCheckpoint
        except Exception:  # a broken or partial install: its checkpoints stay unguarded
            logger.warning("tensortap: pytorch_lightning's ModelCheckpoint was not found")
        else:
            classes.append(PLModelCheckpoint)
    return tuple(classes)


def guard_resume(trainer: Any, guard: CheckpointGuard | None = None) -> None:
    """Check the file ``trainer.fit(ckpt_path=...)`` resolves to before it is loaded:
    ``ckpt_path="last"`` that resolves to a file not complete and finite loads the newest good
    ``.ckpt`` beside it instead (each numbered one passed over a ``fallback`` event; a
    ``resumed`` event names the one used, and what was wrong with the last one); a path
    given by the script is loaded as given, with a ``resumed`` event naming the newest good
    one."""
    checker = guard if guard is not None else CheckpointGuard()
    connector = trainer._checkpoint_connector
    parse = connector._parse_ckpt_path

    @functools.wraps(parse)
    def checked(state_fn: Any, ckpt_path: Any, *args: Any, **kwargs: Any) -> Any:
        path = parse(state_fn, ckpt_path, *args, **kwargs)
        try:
            return _resume_point(ckpt_path, path, checker)
        except Exception as exc:  # a check that fails never stops the resume asked for
            logger.warning("tensortap: the checkpoint to resume from was not checked: %r", exc)
            return path

    connector._parse_ckpt_path = checked


def _resume_point(asked: Any, path: Any, checker: CheckpointGuard) -> Any:
    if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
        return path  # none, or not a local file: Lightning's to load as it does
    problem = verify_checkpoint(path)
    if problem is None:
        return path
    if asked == "last":
        # the file "last" named (last.ckpt: no step in its name) is said in the resumed event
        good = last_good_checkpoint(os.path.dirname(os.path.abspath(path)), checker)
        if good is not None:
            checker.resumed(
                step_of(os.path.basename(good)),
                good,
                f'ckpt_path="last" resumes from {good}, the newest good checkpoint, instead of '
                f"{os.fspath(path)} ({problem})",
            )
            return good
        checker.resumed(
            None,
            None,
            f'no checkpoint beside {os.fspath(path)} is complete and finite: ckpt_path="last" '
            "loads it as asked; to train from the start instead, pass ckpt_path=None",
        )
        return path
    good = last_good_checkpoint(os.path.dirname(os.path.abspath(path)), checker)
    checker.resumed(
        step_of(os.path.basename(path)),
        good,
        f"ckpt_path={os.fspath(path)!r} is not sound ({problem}); it is loaded as the script "
        "asks. "
        + (
            f'The newest good checkpoint is {good}: pass ckpt_path={good!r} (or "last" under '
            "tensortap run)"
            if good is not None
            else "No checkpoint beside it is good: train from the start"
        ),
    )
    return path


def _guarded_class(cls: type[Any]) -> type[Any]:
    """``cls`` with the guard's methods, named as ``cls`` (its ``state_key`` unchanged); a copy
    or a pickle of one of its callbacks (``ddp_spawn`` sends the Trainer to its processes) is
    made as ``cls``, then guarded again, with the same guard."""
    return type(
        cls.__name__,
        (_GuardedSaves, cls),
        {
            "__qualname__": cls.__qualname__,
            "__module__": cls.__module__,
            "__reduce_ex__": lambda self, protocol: (_reguard, (cls, dict(self.__dict__))),
        },
    )


def _reguard(cls: type[Any], state: dict[str, Any]) -> Any:
    callback = object.__new__(cls)
    callback.__dict__.update(state)
    callback.__class__ = _guarded_class(cls)
    return callback


def _arm(callback: Any, guard: CheckpointGuard | None) -> None:
    if guard is not None and not isinstance(guard, CheckpointGuard):
        raise InvalidConfigError(
            "GuardedModelCheckpoint: checkpoint_guard must be a CheckpointGuard, got "
            f"{type(guard).__name__}"
        )
    callback.checkpoint_guard = guard if guard is not None else CheckpointGuard()
    callback._decided = None  # (global step, allowed)
    callback._saving = False


def verify_checkpoint(path: str | os.PathLike[str]) -> str | None:
    """What is wrong with the Lightning checkpoint file ``path`` (unreadable, without a
    ``state_dict``, weights or optimizer state not finite), or None when it is sound."""
    path = os.fspath(path)
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # torch's and pickle's errors: a damaged or foreign file
        return f"it cannot be read ({type(exc).__name__}: {str(exc)[:200]})"
    if not isinstance(loaded, dict) or not isinstance(loaded.get("state_dict"), dict):
        return "it holds no state_dict: it is incomplete"
    bad = nonfinite_name(loaded["state_dict"])
    if bad is not None:
        return f"its weights are not finite ({bad})"
    bad = nonfinite_name({"optimizer_states": loaded.get("optimizer_states") or []})
    if bad is not None:
        return f"its optimizer state is not finite ({bad})"
    return None


def last_good_checkpoint(
    dirpath: str | os.PathLike[str], guard: CheckpointGuard | None = None
) -> str | None:
    """The newest ``.ckpt`` in ``dirpath`` (by its ``step=<n>``, else its time) that
    :func:`verify_checkpoint` finds sound, each newer one passed over an event of ``guard``;
    None when there is none (fit from the start)."""
    dirpath = os.fspath(dirpath)
    try:
        names = [n for n in os.listdir(dirpath) if n.endswith(".ckpt")]
    except FileNotFoundError:
        return None
    candidates = []
    for name in names:
        path = os.path.join(dirpath, name)
        try:
            when = os.path.getmtime(path)
        except OSError:
            continue
        step = step_of(name)
        candidates.append(((step if step is not None else -1, when), path))
    chosen = None
    checker = guard if guard is not None else CheckpointGuard()
    for (step, _), path in sorted(candidates, reverse=True):
        problem = verify_checkpoint(path)
        if problem is None:
            chosen = path
            break
        checker.passed_over(step, path, problem)
    return chosen
