"""Rollback and branch inside a Hugging Face ``Trainer`` (see :mod:`tensortap.healing._rollback`).

::

    from torch.utils.data import BatchSampler, SequentialSampler
    from tensortap.huggingface import (BatchStream, HuggingFaceCheckpoints, RollbackCallback,
                                       TensortapCallback, train_with_rollback)
    import tensortap.pytorch as tt

    batches = tt.SkipBatches(BatchSampler(SequentialSampler(dataset), 8, drop_last=True))
    rollback = tt.Rollback(HuggingFaceCheckpoints("out"), batches=batches)

    def make_trainer():
        args = TrainingArguments("out", max_steps=1000, per_device_train_batch_size=8,
                                 save_strategy="steps", save_steps=50)
        return Trainer(model, args, train_dataset=BatchStream(dataset, batches),
                       callbacks=[TensortapCallback(), RollbackCallback(rollback)])

    train_with_rollback(rollback, make_trainer)

The Trainer's own checkpoints are the ones restored: ``checkpoint-<n>`` holds the state after
``n`` optimizer steps, the rollback's checkpoint of step ``n``. The data goes in as a
:class:`BatchStream`, an ``IterableDataset`` of the samples of the batches a
:class:`~tensortap.pytorch.SkipBatches` keeps (the Trainer's ``DataLoader`` puts them back into
the same batches: ``per_device_train_batch_size`` is the batches' size), so the skip list acts
before the Trainer sees a batch; resumed with ``resume_from_checkpoint``, the Trainer passes
over the batches its ``global_step`` says were trained, which the skip list leaves as they were
(a skipped batch always comes after the checkpoint restored). A request stops ``train()`` at
the end of its step (``control.should_training_stop``); :func:`train_with_rollback` picks the
last good checkpoint and trains again from it, and the new ``TensortapCallback`` session is
recorded as the branch. With ``gradient_accumulation_steps=k`` a step trains the ``k`` next
batches the skip list keeps (its micro-batches), and is judged, replayed, restored and skipped
whole; a pass's short last window (fewer than ``k`` left) is one step with the next pass's
first ``k``, as the Trainer trains it. One process: what is tested.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from transformers import TrainerCallback

from tensortap.exceptions import CheckpointError, InvalidConfigError
from tensortap.healing._budget import MicroBatches, SkipBudget
from tensortap.healing._rollback import Rollback
from tensortap.healing._skip_batches import SkipBatches
from tensortap.pytorch._hook import Hook
from tensortap.pytorch._trainer_healing import TrainerHealing

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_STATE = "trainer_state.json"


class BatchStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """The samples of the batches ``batches`` (a :class:`SkipBatches` over batches of indices)
    keeps, in order: a ``train_dataset`` whose batches the skip list decides. Each reading
    starts at the stream's beginning (the Trainer passes over what it already trained)."""

    def __init__(self, dataset: Any, batches: SkipBatches[Any]) -> None:
        if not isinstance(batches, SkipBatches):
            raise InvalidConfigError(
                "BatchStream needs a SkipBatches over batches of indices (a BatchSampler), got "
                f"{type(batches).__name__}"
            )
        self.dataset, self.batches = dataset, batches

    def __iter__(self) -> Iterator[Any]:
        self.batches.load_state_dict({"position": 0, "offset": 0})
        for indices in self.batches:
            for index in indices:
                yield self.dataset[index]


class HuggingFaceCheckpoints:
    """The ``checkpoint-<n>`` directories the Trainer writes in ``output_dir``; saving is the
    Trainer's. :meth:`load` only says which one the next ``train()`` resumes from
    (:attr:`restore_path`)."""

    def __init__(self, output_dir: str | os.PathLike[str]) -> None:
        self.output_dir = os.fspath(output_dir)
        self._forgotten: dict[str, float] = {}  # path -> its state's time when forgotten
        #: The checkpoint the next ``train()`` resumes from, once one was loaded.
        self.restore_path: str | None = None

    def _written(self, path: str) -> float | None:
        try:
            return os.path.getmtime(os.path.join(path, _STATE))
        except OSError:
            return None  # not a checkpoint, or one still being written

    def _found(self) -> dict[int, str]:
        try:
            names = os.listdir(self.output_dir)
        except FileNotFoundError:
            return {}
        out = {}
        for name in names:
            match = _CHECKPOINT.match(name)
            path = os.path.join(self.output_dir, name)
            written = self._written(path) if match else None
            if match is None or written is None:
                continue
            if path in self._forgotten and written <= self._forgotten[path]:
                continue  # the abandoned branch's (a later one at that step is written again)
            out[int(match.group(1))] = path
        return out

    def path(self, step: int) -> str:
        """The directory of the checkpoint of ``step``."""
        return self._found()[step]

    def save(self, step: int, extra: dict[str, Any]) -> None:
        """Nothing: the Trainer saves (``save_steps``)."""

    def load(self, step: int) -> dict[str, Any]:
        """Check the checkpoint of ``step`` (complete, finite: :func:`verify_checkpoint`) and
        name it for the next ``train()``; a damaged or NaN one raises
        :class:`~tensortap.exceptions.CheckpointError` (the rollback tries an older one)."""
        from tensortap.huggingface._checkpoint_guard import verify_checkpoint

        path = self.path(step)
        problem = verify_checkpoint(path)
        if problem is not None:
            raise CheckpointError(f"the checkpoint of step {step} in {path} is not used: {problem}")
        self.restore_path = path
        return {}

    def steps(self) -> list[int]:
        return sorted(self._found())

    def forget(self, step: int) -> None:
        path = self._found().get(step)
        written = None if path is None else self._written(path)
        if path is not None and written is not None:
            self._forgotten[path] = written


class RollbackCallback(TrainerCallback):
    """Connects a :class:`~tensortap.pytorch.Rollback` to the ``Trainer``: tells it which
    batch each step trains, ends ``train()`` after the step during which a rollback was
    requested, and records the next ``train()``'s tensortap session as the branch.

    ``budget`` (a :class:`~tensortap.pytorch.SkipBudget` with ``then="rollback"``): decide
    from evidence, as a plain PyTorch loop does. A :class:`~tensortap.pytorch.Guard` with this
    budget is put on the optimizer the Trainer builds (each ``train()``'s), a
    :class:`~tensortap.pytorch.Replayer` replays its trips (the kept batch's loss recomputed by
    the model itself, ``model(**batch).loss``, from the batch's ``labels``), and the rollback
    is decided at the end of each step: a transient fault goes on within the same ``train()``,
    a data fault restores and leaves the batch out, a numerics fault tries ``remedies``
    (keyword arguments of :class:`~tensortap.pytorch.Remedies`, made on the Trainer's
    optimizer and moved to each new one; ``None``: none) and stops naming the layer. ``keep``:
    the steps the replayer holds.

    ``gradient_accumulation_steps=k``: a step's ``k`` micro-batches are the next ``k`` the skip
    list keeps; the guard judges the step once, before the optimizer's step, on its worst
    micro-batch loss, naming each (a :class:`~tensortap.healing._budget.MicroBatches`); a replay
    runs every micro-batch of the step again from the weights and RNG before the first; a
    decision is taken at the step's end only (the Trainer calls ``on_step_end`` once a step),
    so a restore is always to a step boundary and skips the step's micro-batches together."""

    def __init__(
        self,
        rollback: Rollback,
        *,
        budget: SkipBudget | None = None,
        remedies: dict[str, Any] | None = None,
        keep: int = 4,
    ) -> None:
        if rollback.batches is None:
            raise InvalidConfigError(
                "RollbackCallback needs a Rollback with batches= (the SkipBatches of the "
                "BatchStream the Trainer trains on)"
            )
        self.rollback = rollback
        # (step, its last batch's position, whether its window was cut short by the pass's end)
        self._cursor: tuple[int, int, bool] | None = None
        self._accumulate = 1  # micro-batches a step
        self._positions: list[int] = []  # the step's micro-batches' positions
        self._divisors: list[int] = []  # what the Trainer divides each one's loss by
        #: The guard, replayer and remedies (None without ``budget``).
        self.healing = (
            None
            if budget is None
            else TrainerHealing(
                rollback, self._replay_step, budget=budget, remedies=remedies, keep=keep
            )
        )
        self._handles: list[Any] = []
        self._replaying = False
        self._captured = False
        self._window: list[tuple[tuple[Any, ...], dict[str, Any], int]] = []  # for a replay
        self._losses: list[Any] = []  # each micro-batch's loss, this step

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._cursor = None
        self._accumulate = int(args.gradient_accumulation_steps)
        model, optimizer = kwargs.get("model"), kwargs.get("optimizer")
        if self.healing is not None and isinstance(model, torch.nn.Module):
            self.healing.begin(model, optimizer)
            self._handles = [
                model.register_forward_pre_hook(self._forward_pre, with_kwargs=True),
                model.register_forward_hook(self._forward),
            ]

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        rollback, step = self.rollback, state.global_step
        if self._cursor is None:  # the first step of this train(): the hook is made by now
            hook = Hook.current()
            if hook is not None:
                rollback.follow_hook(hook)
        if self._cursor is not None and self._cursor[0] == step and self._cursor[2]:
            # the same step again: the pass ended inside its window (a short last window) and
            # the Trainer goes on with the next pass's first k batches, all one step
            new = self._step_positions(step, after_pass=True)
            self._positions = [*self._positions, *new]
            self._divisors = [*self._divisors, *[len(new)] * len(new)]
            rollback.trained(step, MicroBatches(self._positions))
            return
        positions = self._positions = self._step_positions(step)
        self._divisors = [len(positions)] * len(positions)
        rollback.trained(step, positions[0] if len(positions) == 1 else MicroBatches(positions))
        self._captured, self._losses = False, []

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        losses, self._losses = self._losses, []
        if self.healing is None or not losses or self._cursor is None:
            return
        step, ids = self._cursor[0], self._positions
        for i, loss in enumerate(losses[:-1]):  # an accumulated step's micro-batches
            self.healing.observe_micro(loss, step, ids[min(i, len(ids) - 1)])
        last = ids[min(len(losses), len(ids)) - 1]
        self.healing.observe(losses[-1], step, last, step_loss=_total(losses))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        rollback = self.rollback
        if self.healing is None:
            if rollback.pending:
                control.should_training_stop = True
            return
        done = rollback.rollbacks
        rollback.restore()  # the trips replayed, a request decided: maybe nothing to undo
        if rollback.rollbacks > done or rollback.should_stop:
            control.should_training_stop = True
            control.should_save = False  # the abandoned branch's state is no checkpoint

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.healing is not None:
            self.healing.end()
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _forward_pre(self, module: Any, args: Any, kwargs: Any) -> None:
        """Each training forward pass of the step (one a micro-batch): its batch is kept for a
        replay, captured before the first (the weights and RNG the step started from)."""
        if self._replaying or not module.training or not torch.is_grad_enabled():
            return
        if self.healing is None or self._cursor is None:
            return
        if not self._captured:
            self._captured, self._window = True, []
            step = self._cursor[0]
            self.healing.capture(self._window, step, self._positions[0])
        divisor = self._divisors[min(len(self._window), len(self._divisors) - 1)]
        self._window.append((tuple(args), dict(kwargs), divisor))

    def _forward(self, module: Any, args: Any, output: Any) -> None:
        if self._replaying or not module.training or not torch.is_grad_enabled():
            return
        loss = _loss_of(output)
        if loss is not None:
            self._losses.append(loss)

    def _replay_step(self, model: Any, batch: Any) -> Any:
        """A kept step again: the model's own loss of each of its micro-batches, and their
        backward passes (each divided by the accumulation, as the Trainer does); their sum, as
        the step's loss was observed. A window cut short by a pass's end divides by the
        micro-batches it had, as the Trainer does."""
        losses = []
        for args, kwargs, accumulate in batch:
            self._replaying = True
            try:
                loss = _loss_of(model(*args, **kwargs))
            finally:
                self._replaying = False
            if loss is None:
                raise InvalidConfigError(
                    "RollbackCallback(budget=...) replays a step from the model's own loss: the "
                    "model must return one (a 'loss' entry, given the batch's labels)"
                )
            (loss / accumulate if accumulate != 1 else loss).backward()
            losses.append(loss.detach())
        return _total(losses)

    def _step_positions(self, step: int, *, after_pass: bool = False) -> list[int]:
        """The positions of the batches step ``step`` trains: the ``k`` (its micro-batches)
        after the ``step * k`` the skip list keeps before them (counted once per ``train()``,
        then a step at a time). Where one pass of the stream is of known length, it follows
        the Trainer over the pass's end: fewer than ``k`` left make a short window, which the
        next pass's first ``k`` join (``after_pass``: those), and a resumed ``train()`` that
        passes over the whole first pass starts the next one."""
        k, kept = self._accumulate, self._kept()
        if kept is None:
            return self._positions_unbounded(step)
        if after_pass:
            start = 0
        elif self._cursor is None or self._cursor[0] != step - 1:
            start = step * k if step * k < len(kept) else 0  # the Trainer's skip, one pass
        else:
            start = kept.index(self._cursor[1]) + 1 if self._cursor[1] in kept else len(kept)
            start = start if start < len(kept) else 0  # the pass ended with the last step
        positions = kept[start : start + k]
        if not positions:  # nothing kept: as if the stream went on
            return self._positions_unbounded(step)
        self._cursor = (step, positions[-1], not after_pass and len(positions) < k)
        return positions

    def _kept(self) -> list[int] | None:
        """The positions one pass of the stream keeps, where its length is known."""
        batches = self.rollback.batches
        try:
            n = len(batches.batches) if batches is not None else None  # type: ignore[arg-type]
        except TypeError:
            return None
        if n is None or batches is None:
            return None
        return [p for p in range(n) if p not in batches.skip]

    def _positions_unbounded(self, step: int) -> list[int]:
        """:meth:`_step_positions` over a stream of unknown length: positions never wrap."""
        skip = self.rollback.batches.skip if self.rollback.batches is not None else set()
        k = self._accumulate
        if self._cursor is None or self._cursor[0] != step - 1:
            position, left = -1, step * k
        else:
            position, left = self._cursor[1], 0
        while left:
            position += 1
            if position not in skip:
                left -= 1
        positions: list[int] = []
        while len(positions) < k:
            position += 1
            if position not in skip:
                positions.append(position)
        self._cursor = (step, position, False)
        return positions


def train_with_rollback(
    rollback: Rollback,
    make_trainer: Callable[[], Any],
    resume_from_checkpoint: str | None = None,
    **train_kwargs: Any,
) -> Any:
    """``make_trainer().train(resume_from_checkpoint=..., **train_kwargs)`` until a
    ``train()`` ends without a rollback (or the rollback's budget refuses one); each rollback
    trains again from the restored checkpoint. Returns the last ``Trainer``."""
    checkpoints = rollback.checkpoints
    if not isinstance(checkpoints, HuggingFaceCheckpoints):
        raise InvalidConfigError(
            "train_with_rollback restores the Trainer's own checkpoints: make the Rollback "
            f"with HuggingFaceCheckpoints(<output_dir>), got {type(checkpoints).__name__}"
        )
    while True:
        done = rollback.rollbacks  # a callback with a budget restores at a step's end
        trainer = make_trainer()
        trainer.train(resume_from_checkpoint=resume_from_checkpoint, **train_kwargs)
        if rollback.should_stop:
            return trainer
        if rollback.rollbacks == done and rollback.restore() is None:
            return trainer
        resume_from_checkpoint = checkpoints.restore_path


def _total(losses: list[Any]) -> Any:
    """A step's loss over its micro-batches, summed in order (the same sum in a replay)."""
    total = losses[0]
    for loss in losses[1:]:
        total = total + loss
    return total


def _loss_of(output: Any) -> Any:
    """The loss a model's output holds (a ``ModelOutput``'s or a dict's ``loss``), or None."""
    loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    return loss if isinstance(loss, torch.Tensor) else None
