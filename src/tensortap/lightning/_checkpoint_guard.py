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
from tensortap.pytorch._nonfinite import nonfinite_name

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    _Base = ModelCheckpoint
else:
    _Base = object


class _GuardedSaves(_Base):
    """What :class:`GuardedModelCheckpoint` adds to a ``ModelCheckpoint`` (or to a subclass of
    it: :func:`guard_checkpoints` gives one made by a script these methods)."""

    checkpoint_guard: CheckpointGuard
    _decided: tuple[int, bool] | None

    def _allowed(self, trainer: Any) -> bool:
        """Whether a save at this step may go on: decided once per step (top-k and last ask
        alike), agreed by every rank."""
        step = int(trainer.global_step)
        if self._decided is not None and self._decided[0] == step:
            return self._decided[1]
        module = trainer.lightning_module
        reason = self.checkpoint_guard.refusal(
            module if isinstance(module, torch.nn.Module) else None
        )
        if trainer.world_size > 1:
            anyone = trainer.strategy.reduce_boolean_decision(reason is not None, all=False)
            if anyone and reason is None:
                reason = "another rank refused the save (its weights are not finite)"
        allowed = self.checkpoint_guard.judge(step, reason)
        self._decided = (step, allowed)
        return allowed

    def _save_topk_checkpoint(self, trainer: Any, monitor_candidates: dict[str, Any]) -> None:
        if self._allowed(trainer):
            super()._save_topk_checkpoint(trainer, monitor_candidates)

    def _save_last_checkpoint(self, trainer: Any, monitor_candidates: dict[str, Any]) -> None:
        if self._allowed(trainer):
            super()._save_last_checkpoint(trainer, monitor_candidates)

    def _save_checkpoint(self, trainer: Any, filepath: str) -> None:
        super()._save_checkpoint(trainer, filepath)
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
    ``state_key``, and what it saves, stay as they were). What ``tensortap run`` does to every
    Trainer. Returns the callbacks guarded."""
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
