"""Checkpoints never poisoned in a Hugging Face ``Trainer`` (see
:mod:`tensortap.pytorch._checkpoint_guard`)::

    from tensortap.huggingface import CheckpointGuardCallback, last_good_checkpoint

    trainer = Trainer(model, TrainingArguments("out", save_steps=50, save_total_limit=2, ...),
                      callbacks=[CheckpointGuardCallback()])
    trainer.train(resume_from_checkpoint=last_good_checkpoint("out"))

The callback refuses a save (``control.should_save = False`` at the end of the step, before
the Trainer writes ``checkpoint-<n>``) while the model's weights are not finite or the guard
given to its :class:`~tensortap.pytorch.CheckpointGuard` is tripping. Nothing is written, so
the Trainer's rotation (``save_total_limit``, run after each save) deletes nothing: the last
good checkpoint stays, pinned, until a save is allowed again. :func:`last_good_checkpoint`
is the newest ``checkpoint-<n>`` that is complete and finite (each one passed over is an
event), for ``resume_from_checkpoint``.

The script's own ``trainer.save_model(...)`` is decided by the same guard: a Trainer holding a
:class:`CheckpointGuardCallback` refuses a save of non-finite weights, or one while the guard
trips (nothing written, an event and a warning naming the last good checkpoint). A callback
is not told its Trainer, so ``Trainer.save_model`` itself is wrapped, once, when the first
callback is made; the wrapper asks the Trainer's callbacks and does nothing more for a
Trainer without one.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
from typing import Any

import torch
from transformers import TrainerCallback

from tensortap.exceptions import InvalidConfigError
from tensortap.pytorch._checkpoint_guard import CheckpointGuard
from tensortap.pytorch._checkpoints import any_rank
from tensortap.pytorch._nonfinite import nonfinite_name

logger = logging.getLogger(__name__)

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_STATE = "trainer_state.json"
_SAFE, _SAFE_INDEX = "model.safetensors", "model.safetensors.index.json"
_BIN, _BIN_INDEX = "pytorch_model.bin", "pytorch_model.bin.index.json"
_OPTIMIZER = "optimizer.pt"
_MAX_INDEX_BYTES = 64 << 20
_BEST = ("best_metric", "best_model_checkpoint", "best_global_step")  # TrainerState's
_WRAPPED = "__tensortap_checkpoint_guard__"  # marks Trainer.save_model once wrapped


class CheckpointGuardCallback(TrainerCallback):
    """Refuses the Trainer's saves while the weights are not finite or the guard is tripping
    (an event each, never an exception), and notes each save made as the last good one."""

    def __init__(self, guard: CheckpointGuard | None = None) -> None:
        if guard is not None and not isinstance(guard, CheckpointGuard):
            raise InvalidConfigError(
                f"CheckpointGuardCallback needs a CheckpointGuard, got {type(guard).__name__}"
            )
        self.guard = guard if guard is not None else CheckpointGuard()
        self._decided: tuple[int, bool] | None = None  # (global step, allowed)
        self._best: dict[str, Any] | None = None  # the state's best before an evaluation
        guard_own_saves()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._decide(state, control, kwargs.get("model"))

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._decide(state, control, kwargs.get("model"))

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # the Trainer judges the new best after this (and, with save_strategy="best", decides
        # to save then): what it was is put back if that save is refused
        self._best = {name: getattr(state, name, None) for name in _BEST}

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._decided == (state.global_step, False):
            return  # refused by guard_trainer's check: nothing was written
        where = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        self.guard.saved(state.global_step, where)

    def allowed(self, step: int, model: Any) -> bool:
        """Whether the save of ``step`` may go on (decided once per step: a refusal is one
        event however often the Trainer asks; the ranks agree, one gather per save)."""
        if self._decided is not None and self._decided[0] == step:
            return self._decided[1]
        module = model if isinstance(model, torch.nn.Module) else None
        # every rank saves or none does: a rank left out of a collective save (FSDP,
        # DeepSpeed) would hang the others
        allowed = self.guard.judge(step, any_rank(self.guard.checked_refusal(module)))
        self._decided = (step, allowed)
        return allowed

    def allowed_own(self, trainer: Any, output_dir: str | None) -> bool:
        """Whether the script's ``trainer.save_model(output_dir)`` may go on: one decision (and
        on refusal one event) per call. The ranks agree only where the save is collective
        (FSDP, DeepSpeed: every rank calls it); elsewhere a script may call it on rank 0
        alone, and a gather would wait for the others forever."""
        where = output_dir if output_dir is not None else trainer.args.output_dir
        model = trainer.model
        reason = self.guard.checked_refusal(model if isinstance(model, torch.nn.Module) else None)
        if getattr(trainer, "is_fsdp_enabled", False) or getattr(
            trainer, "is_deepspeed_enabled", False
        ):
            reason = any_rank(reason)
        what = "trainer.save_model(" + ("" if output_dir is None else repr(output_dir)) + ")"
        return self.guard.judge_own(what, os.fspath(where), trainer.state.global_step, reason)

    def _decide(self, state: Any, control: Any, model: Any) -> None:
        if control.should_save and not self.allowed(state.global_step, model):
            control.should_save = False

    def _refused_best(self, state: Any) -> None:
        """A save the Trainer decided after the callbacks ran (``save_strategy="best"``) was
        refused: the best it noted (a checkpoint never written) is put back."""
        noted = state.best_model_checkpoint
        if self._best is not None and noted is not None and not os.path.isdir(noted):
            for name, value in self._best.items():
                if hasattr(state, name):
                    setattr(state, name, value)


def guard_own_saves() -> None:
    """Wrap ``transformers.Trainer.save_model`` (once per process) so that a Trainer holding a
    :class:`CheckpointGuardCallback` has it decide the script's own saves. The Trainer's
    calls from inside (``_internal_call=True``: its checkpoints, decided already by
    :func:`guard_trainer`; a push to the Hub) go through as they were; so does every call
    of a Trainer without the callback. A check that fails lets the save through, with a
    warning."""
    from transformers import Trainer

    original = Trainer.save_model
    if getattr(original, _WRAPPED, False):
        return

    @functools.wraps(original)
    def save_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        internal = args[1] if len(args) > 1 else kwargs.get("_internal_call", False)
        callback = None if internal else _callback_of(self)
        if callback is None:
            return original(self, *args, **kwargs)
        output_dir = args[0] if args else kwargs.get("output_dir")
        try:
            allowed = callback.allowed_own(self, output_dir)
        except Exception as exc:  # a check that fails never stops the save
            logger.warning("tensortap: trainer.save_model() saved unchecked: %r", exc)
            return original(self, *args, **kwargs)
        if not allowed:
            return None  # nothing written: what output_dir held stays
        done = original(self, *args, **kwargs)
        where = output_dir if output_dir is not None else self.args.output_dir
        callback.guard.saved(self.state.global_step, os.fspath(where))
        return done

    setattr(save_model, _WRAPPED, True)
    Trainer.save_model = save_model  # type: ignore[method-assign]


def _callback_of(trainer: Any) -> CheckpointGuardCallback | None:
    handler = getattr(trainer, "callback_handler", None)
    for callback in getattr(handler, "callbacks", ()):
        if isinstance(callback, CheckpointGuardCallback):
            return callback
    return None


def guard_trainer(trainer: Any, guard: CheckpointGuard | None = None) -> CheckpointGuardCallback:
    """Guard every save of ``trainer`` (a ``transformers.Trainer``): its
    :class:`CheckpointGuardCallback` (added unless it has one) decides, also for the saves the
    Trainer decides after its callbacks ran (``save_strategy="best"``, a save at the end of an
    evaluation), which a callback alone cannot refuse, and the script's own ``save_model``
    (:func:`guard_own_saves`); and ``train(resume_from_checkpoint=True)`` resumes from the
    newest *good* checkpoint (:func:`resume_point`). What ``tensortap run`` does to every
    Trainer. Returns the callback."""
    found = [
        c for c in trainer.callback_handler.callbacks if isinstance(c, CheckpointGuardCallback)
    ]
    callback = found[0] if found else CheckpointGuardCallback(guard)
    if not found:
        trainer.add_callback(callback)
    save, train = trainer._save_checkpoint, trainer.train

    @functools.wraps(save)
    def guarded_save(model: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            allowed = callback.allowed(trainer.state.global_step, trainer.model)
        except Exception as exc:  # a check that fails never stops the save
            logger.warning("tensortap: the checkpoint was saved unchecked: %r", exc)
            allowed = True
        if not allowed:
            callback._refused_best(trainer.state)
            return None  # nothing written, so the rotation deletes nothing
        return save(model, *args, **kwargs)

    def checked(asked: Any) -> Any:
        try:
            return resume_point(trainer.args.output_dir, asked, callback.guard)
        except Exception as exc:  # a check that fails never stops the resume asked for
            logger.warning("tensortap: the checkpoint to resume from was not checked: %r", exc)
            return asked

    @functools.wraps(train)
    def guarded_train(*args: Any, **kwargs: Any) -> Any:
        if args:
            args = (checked(args[0]), *args[1:])
        elif "resume_from_checkpoint" in kwargs:
            kwargs["resume_from_checkpoint"] = checked(kwargs["resume_from_checkpoint"])
        return train(*args, **kwargs)

    trainer._save_checkpoint, trainer.train = guarded_save, guarded_train
    return callback


def resume_point(output_dir: str, asked: Any, guard: CheckpointGuard | None = None) -> Any:
    """What ``Trainer.train(resume_from_checkpoint=asked)`` should be given: for ``True``
    (the newest ``checkpoint-<n>`` of ``output_dir``), the newest good one, each newer one
    passed over an event (unchanged when all are sound, or none is). A path given by the
    script is kept, with an event naming the newest good one when it is not sound."""
    checker = guard if guard is not None else CheckpointGuard()
    if asked is True:
        good = last_good_checkpoint(output_dir, checker)
        newest = _newest(output_dir)
        if good is not None and newest is not None and not _same_path(good, newest):
            checker.resumed(
                _step(good),
                good,
                f"resume_from_checkpoint=True resumes from {good}, the newest good "
                f"checkpoint, instead of {newest}",
            )
            return good
        if good is None and newest is not None:
            checker.resumed(
                _step(newest),
                None,
                f"no checkpoint in {output_dir} is complete and finite: "
                f"resume_from_checkpoint=True loads {newest} as asked; to train from the start "
                "instead, pass resume_from_checkpoint=None",
            )
        return asked
    if isinstance(asked, (str, os.PathLike)) and os.path.isdir(asked):
        problem = verify_checkpoint(asked)
        if problem is not None:
            good = last_good_checkpoint(os.path.dirname(os.path.abspath(asked)), checker)
            checker.resumed(
                _step(os.fspath(asked)),
                good,
                f"resume_from_checkpoint={os.fspath(asked)!r} is not sound ({problem}); it is "
                "loaded as the script asks. "
                + (
                    f"The newest good checkpoint is {good}: pass resume_from_checkpoint={good!r}"
                    " (or True under tensortap run)"
                    if good is not None
                    else "No checkpoint beside it is good: train from the start"
                ),
            )
    return asked


def _newest(output_dir: str) -> str | None:
    try:
        names = [n for n in os.listdir(output_dir) if _CHECKPOINT.match(n)]
    except FileNotFoundError:
        return None
    if not names:
        return None
    return os.path.join(output_dir, max(names, key=lambda n: int(n.split("-")[1])))


def _step(path: str) -> int | None:
    match = _CHECKPOINT.match(os.path.basename(os.path.normpath(path)))
    return int(match.group(1)) if match else None


def _same_path(a: str, b: str) -> bool:
    return os.path.abspath(a) == os.path.abspath(b)


def verify_checkpoint(path: str | os.PathLike[str]) -> str | None:
    """What is wrong with the Trainer's checkpoint directory ``path`` (incomplete, unreadable,
    weights or optimizer state not finite), or None when it is sound. Reads the weights with
    ``safetensors`` or ``torch.load(weights_only=True)``: no code runs from its bytes."""
    path = os.fspath(path)
    try:
        with open(os.path.join(path, _STATE), encoding="utf-8") as f:
            json.loads(f.read(_MAX_INDEX_BYTES))
    except (OSError, ValueError) as exc:
        return f"its {_STATE} cannot be read ({type(exc).__name__}: {exc}): it is incomplete"
    files = _weight_files(path)
    if isinstance(files, str):
        return files
    for file in files:
        try:
            bad = _nonfinite_in(file)
        except Exception as exc:  # safetensors' and torch's errors: a damaged file
            return f"{file} cannot be read ({type(exc).__name__}: {exc})"
        if bad is not None:
            return f"its weights are not finite ({bad} in {os.path.basename(file)})"
    optimizer = os.path.join(path, _OPTIMIZER)
    if os.path.exists(optimizer):
        try:
            optim_state = torch.load(optimizer, map_location="cpu", weights_only=True, mmap=True)
        except Exception as exc:
            return f"{optimizer} cannot be read ({type(exc).__name__}: {exc})"
        bad = nonfinite_name(optim_state) if isinstance(optim_state, dict) else None
        if bad is not None:
            return f"its optimizer state is not finite ({bad})"
    return None


def last_good_checkpoint(
    output_dir: str | os.PathLike[str], guard: CheckpointGuard | None = None
) -> str | None:
    """The newest ``checkpoint-<n>`` in ``output_dir`` that :func:`verify_checkpoint` finds
    sound (each newer one passed over is an event of ``guard``), or None when there is none
    (train from the start)."""
    output_dir = os.fspath(output_dir)
    try:
        names = os.listdir(output_dir)
    except FileNotFoundError:
        return None
    candidates = [
        (int(match.group(1)), os.path.join(output_dir, name))
        for name in names
        if (match := _CHECKPOINT.match(name)) and os.path.isdir(os.path.join(output_dir, name))
    ]
    chosen = (guard if guard is not None else CheckpointGuard()).newest_good(
        candidates, verify_checkpoint
    )
    return None if chosen is None else chosen[1]


def _weight_files(path: str) -> list[str] | str:
    """The weight files of the checkpoint, or what is missing."""
    for single, index in ((_SAFE, _SAFE_INDEX), (_BIN, _BIN_INDEX)):
        if os.path.exists(os.path.join(path, single)):
            return [os.path.join(path, single)]
        where = os.path.join(path, index)
        if os.path.exists(where):
            try:
                with open(where, encoding="utf-8") as f:
                    weight_map = json.loads(f.read(_MAX_INDEX_BYTES))["weight_map"]
                shards = sorted(set(weight_map.values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                return f"{where} cannot be read ({type(exc).__name__}: {exc})"
            missing = [s for s in shards if not os.path.exists(os.path.join(path, str(s)))]
            if missing:
                return f"shard(s) {', '.join(map(str, missing))} named by {index} are missing"
            return [os.path.join(path, str(s)) for s in shards]
    return f"it holds no weights ({_SAFE} or {_BIN}): it is incomplete"


def _nonfinite_in(file: str) -> str | None:
    """The first tensor of the weight file that is not finite (a ``.safetensors`` file is read
    one tensor at a time; a ``.bin`` is memory-mapped where it can be)."""
    if file.endswith(".safetensors"):
        from safetensors import safe_open

        with safe_open(file, framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                bad = nonfinite_name({name: f.get_tensor(name)})
                if bad is not None:
                    return bad
        return None
    loaded = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    return nonfinite_name(loaded if isinstance(loaded, dict) else {"weights": loaded})
