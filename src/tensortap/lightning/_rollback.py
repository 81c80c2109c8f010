"""Rollback and branch inside Lightning's ``Trainer`` (see :mod:`tensortap.healing._rollback`).

::

    from tensortap.lightning import LightningCheckpoints, RollbackCallback, TensortapCallback
    from tensortap.lightning import fit_with_rollback
    import tensortap.pytorch as tt

    batches = tt.SkipBatches(train_loader)          # Lightning saves and restores where it is
    rollback = tt.Rollback(LightningCheckpoints("ckpts"), batches=batches)

    def make_trainer():
        return lightning.pytorch.Trainer(max_steps=1000, callbacks=[
            TensortapCallback(out_dir="runs/job1"), RollbackCallback(rollback),
            ModelCheckpoint("ckpts", every_n_train_steps=50, save_top_k=-1)])

    fit_with_rollback(rollback, make_trainer, module, train_dataloaders=batches)

Lightning's own checkpoints are the ones restored: ``ModelCheckpoint(every_n_train_steps=k,
save_top_k=-1)`` writes ``...step=<n>.ckpt``, the state after ``n`` optimizer steps, which is the
rollback's checkpoint of step ``n``. A request (``rollback.request`` in ``training_step``, the
guard, a rule's rollback action) stops the fit after its batch; :func:`fit_with_rollback` then
picks the last good checkpoint, adds the batches to the skip list and fits again from it
(``ckpt_path``): Lightning restores the model, the optimizer, its loops and, since
:class:`~tensortap.pytorch.SkipBatches` is a stateful iterable, where the batches were. The
``TensortapCallback`` of the new fit writes a new session, which :class:`RollbackCallback`
records as a branch of the first.

In memory, within one fit::

    rollback = tt.Rollback(tt.MemoryCheckpoints(keep=2), every=50)
    budget = tt.SkipBudget(2, 10, then="rollback")
    trainer = lightning.pytorch.Trainer(max_steps=1000, callbacks=[
        TensortapCallback(), RollbackCallback(rollback, budget=budget)])
    trainer.fit(module, train_loader)

Every ``every`` optimizer steps, when a batch starts, the callback copies the fit's state
(:mod:`tensortap.lightning._fit_state`: the module, the optimizers, the schedulers, the random
number generators and the loop's step count); when the rollback restores (at the end of a
batch, the guard's budget spent or a request heard), the copy is put back in place,
``trainer.global_step`` is the checkpoint's step again and the fit goes on with its next batch
(the batches between are not trained again). One device only (refused otherwise, saying what
to use). ``PLRollbackCallback`` is the same callback for ``pytorch_lightning``'s Trainer.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from tensortap.exceptions import CheckpointError, InvalidConfigError
from tensortap.healing._budget import MicroBatches, SkipBudget
from tensortap.healing._checkpoints import MemoryCheckpoints
from tensortap.healing._rollback import Rollback
from tensortap.lightning import _fit_state
from tensortap.lightning._checkpoint_names import STEP_IN_NAME
from tensortap.pytorch._hook import Hook
from tensortap.pytorch._trainer_healing import TrainerHealing


class LightningCheckpoints:
    """The checkpoints a ``ModelCheckpoint`` writes in ``dirpath``, by the ``step=<n>`` in
    their names (the default ``epoch={epoch}-step={step}``); saving is Lightning's.
    :meth:`load` only says which file the next fit restores (:attr:`restore_path`)."""

    def __init__(self, dirpath: str | os.PathLike[str]) -> None:
        self.dirpath = os.fspath(dirpath)
        self._forgotten: set[str] = set()
        #: The checkpoint the next fit restores (``ckpt_path``), once one was loaded.
        self.restore_path: str | None = None

    def _files(self) -> dict[int, str]:
        """The newest file of each step (a fit after a rollback writes ``...-v1.ckpt``)."""
        try:
            names = os.listdir(self.dirpath)
        except FileNotFoundError:
            return {}
        found: dict[int, tuple[float, str]] = {}
        for name in names:
            match = STEP_IN_NAME.search(name)
            path = os.path.join(self.dirpath, name)
            if not name.endswith(".ckpt") or match is None or path in self._forgotten:
                continue
            try:
                when = os.path.getmtime(path)
            except OSError:
                continue
            step = int(match.group(1))
            if step not in found or when >= found[step][0]:
                found[step] = (when, path)
        return {step: path for step, (_, path) in found.items()}

    def path(self, step: int) -> str:
        """The file of the checkpoint of ``step``."""
        return self._files()[step]

    def save(self, step: int, extra: dict[str, Any]) -> None:
        """Nothing: ``ModelCheckpoint`` saves."""

    def load(self, step: int) -> dict[str, Any]:
        """Check the file of ``step`` (readable, finite) and name it for the next fit; a
        damaged or NaN one raises :class:`~tensortap.exceptions.CheckpointError` (the rollback
        tries an older one)."""
        from tensortap.lightning._checkpoint_guard import verify_checkpoint

        path = self.path(step)
        problem = verify_checkpoint(path)
        if problem is not None:
            raise CheckpointError(f"the checkpoint of step {step} in {path} is not used: {problem}")
        self.restore_path = path
        return {}  # where the batches were is in the checkpoint: Lightning restores it

    def steps(self) -> list[int]:
        return sorted(self._files())

    def forget(self, step: int) -> None:
        path = self._files().get(step)
        if path is not None:
            self._forgotten.add(path)


class RollbackMixin:
    """Connects a :class:`~tensortap.pytorch.Rollback` to Lightning's ``Trainer``: tells it which
    batch each step trains, and acts on its restores at the end of each batch. With
    :class:`LightningCheckpoints` (Lightning's files), it stops the fit after the batch during
    which a rollback was requested (agreed by every rank under DDP: one reduction per step) and
    records the next fit's tensortap session as the branch (:func:`fit_with_rollback` fits
    again). With :class:`~tensortap.healing.MemoryCheckpoints`, it copies the fit's state
    every ``rollback.every`` steps and puts a copy back in place, within the same fit (see the
    module docstring). The behaviour of ``RollbackCallback`` (``lightning.pytorch``) and
    ``PLRollbackCallback`` (``pytorch_lightning``): each Trainer takes its own package's
    ``Callback``.

    ``budget`` (a :class:`~tensortap.pytorch.SkipBudget` with ``then="rollback"``): decide
    from evidence, as a plain PyTorch loop does. A :class:`~tensortap.pytorch.Guard` with this
    budget is put on the optimizer ``configure_optimizers`` returns (each fit's, and again after
    an in-memory restore), a :class:`~tensortap.pytorch.Replayer` replays its trips (the kept
    batch's loss recomputed by ``training_step``), and the rollback is decided at the end of
    each batch: a transient fault goes on within the same fit, a data fault restores and leaves
    the batch out, a numerics fault tries ``remedies`` (keyword arguments of
    :class:`~tensortap.pytorch.Remedies`, made on the fit's optimizer and moved to each new
    one; ``None``: none) and stops naming the layer. Lightning runs the step's forward and
    backward passes inside ``optimizer.step`` (a closure), after the guard would look at the
    gradients; so, for the fit, the module's ``optimizer_step`` runs the closure first and hands
    ``optimizer.step`` its result (one optimizer, automatic optimization; a closure called more
    than once, as LBFGS's, is not supported). ``keep``: the steps the replayer holds.

    ``accumulate_grad_batches=k``: a step is its ``k`` micro-batches. The guard judges it once,
    at the optimizer's step, on its worst micro-batch loss, naming each micro-batch (a
    :class:`~tensortap.healing._budget.MicroBatches`); a replay runs the whole window again
    from the weights before it; a restore (and a checkpoint) happens only at a step's end,
    never inside a window, so the fit goes on with the first micro-batch of a new window."""

    def __init__(
        self,
        rollback: Rollback,
        *,
        budget: SkipBudget | None = None,
        remedies: dict[str, Any] | None = None,
        keep: int = 4,
    ) -> None:
        super().__init__()
        if not isinstance(rollback, Rollback):
            raise InvalidConfigError(
                "RollbackCallback needs a tensortap Rollback: "
                "tt.Rollback(tt.MemoryCheckpoints(), every=50) to roll back in memory within "
                "the fit, or tt.Rollback(LightningCheckpoints(dirpath), batches=...) with "
                f"fit_with_rollback; got {type(rollback).__name__}"
            )
        self.rollback = rollback
        #: The checkpoints held in memory, put back within the fit (None: Lightning's files,
        #: or your own, restored by fitting again).
        self.memory = (
            rollback.checkpoints if isinstance(rollback.checkpoints, MemoryCheckpoints) else None
        )
        if self.memory is not None and (rollback.every is None or rollback.batches is not None):
            raise InvalidConfigError(
                "RollbackCallback with MemoryCheckpoints copies the fit's state every "
                "Rollback(every=k) optimizer steps and goes on with the fit's next batch after a "
                "restore (a batch stream cannot be rewound under a running fit): give every=, "
                f"leave batches= out; got every={rollback.every!r}, batches={rollback.batches!r}"
            )
        #: The guard, replayer and remedies (None without ``budget``).
        self.healing = (
            None
            if budget is None
            else TrainerHealing(
                rollback, self._replay_step, budget=budget, remedies=remedies, keep=keep
            )
        )
        self._module: Any = None
        self._trained: tuple[int, Any, int] | None = None  # (step, batch id, batch index)
        self._at_batch_end = False  # a restore now is in on_train_batch_end
        self._window: list[tuple[Any, int]] = []  # the step's micro-batches, for a replay
        self._window_ids: list[Any] = []
        self._window_losses: list[torch.Tensor] = []  # its micro-batches' losses before the last
        #: The copy just put back at a batch's end, whose step-interval plateau schedulers
        #: Lightning steps once more after it: put back again before the next batch.
        self._restored: _fit_state.FitState | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        hook = Hook.current()  # the TensortapCallback's, made at on_fit_start
        if hook is not None:
            self.rollback.follow_hook(hook)
        if self.memory is not None:
            problem = _fit_state.refusal(trainer, pl_module)
            if problem is not None:
                raise InvalidConfigError(f"RollbackCallback: {problem}")
            self.memory.bind(
                lambda: _fit_state.capture(trainer, pl_module),
                lambda state: self._restore(trainer, pl_module, state),
            )
        if self.healing is None:
            return
        if len(trainer.optimizers) != 1 or not pl_module.automatic_optimization:
            raise InvalidConfigError(
                "RollbackCallback(budget=...) guards one optimizer under automatic "
                f"optimization; got {len(trainer.optimizers)} optimizer(s), "
                f"automatic_optimization={pl_module.automatic_optimization}"
            )
        self.healing.begin(pl_module, trainer.optimizers[0])
        self._module = pl_module
        original = pl_module.optimizer_step  # the class's, or the user's own

        def optimizer_step(
            epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None
        ) -> Any:
            if optimizer_closure is None or self.healing is None:
                return original(epoch, batch_idx, optimizer, optimizer_closure)
            loss = optimizer_closure()  # forward and backward, before the guard looks
            if isinstance(loss, torch.Tensor) and self._trained is not None:
                step, batch_id, _ = self._trained
                window = [*self._window_losses, loss.detach()]
                self.healing.observe(loss, step, batch_id, step_loss=_total(window))
            return original(epoch, batch_idx, optimizer, lambda: loss)

        pl_module.optimizer_step = optimizer_step

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, index: int) -> None:
        self._settle(trainer)
        rollback, step = self.rollback, trainer.global_step
        first = self._trained is None or self._trained[0] != step  # a new window (step)
        batch_id: Any = index
        if self.memory is not None:
            self._follow_hook()
            if step % (rollback.every or 1) == 0 and step not in self.memory.steps():
                rollback.checkpoint(step)  # the state before step `step` trains
            batch_id = (trainer.current_epoch, index)  # ids of one fit, over its epochs
        elif rollback.batches:
            batch_id = rollback.batches.take()
        if first:
            self._window, self._window_ids, self._window_losses = [], [], []
        self._window_ids.append(batch_id)
        ids = self._window_ids
        rollback.trained(step, batch_id if len(ids) == 1 else MicroBatches(ids))
        self._trained = (step, batch_id, index)
        if self.healing is not None:
            if first:  # before the window's first forward pass: weights and RNG as they were
                window = (self._window, trainer.accumulate_grad_batches)
                self.healing.capture(window, step, batch_id)
            self._window.append((batch, index))

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, *args: Any) -> None:
        rollback = self.rollback
        if self._trained is not None and trainer.global_step == self._trained[0]:
            # a micro-batch inside an accumulation window: its loss joins the step's, and
            # nothing is decided before the step's end (a restore mid-window would train
            # the rest of the window on other weights)
            loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
            if self.healing is not None and isinstance(loss, torch.Tensor):
                step, batch_id, _ = self._trained
                self._window_losses.append(loss.detach())
                self.healing.observe_micro(loss, step, batch_id)
            return
        if self.memory is not None:
            self._follow_hook()
            done = rollback.rollbacks
            self._at_batch_end = True
            try:
                rollback.restore()  # trips replayed, a request decided: maybe nothing to do
            finally:
                self._at_batch_end = False
            if rollback.rollbacks > done and self.healing is not None:
                # a guard on the optimizer as restored (its window starts again, as a new fit's)
                self.healing.begin(pl_module, trainer.optimizers[0])
            if rollback.should_stop:
                trainer.should_stop = True
            return
        if self.healing is not None:
            done = rollback.rollbacks
            rollback.restore()  # the trips replayed, a request decided: maybe nothing
            if rollback.rollbacks > done or rollback.should_stop:
                trainer.should_stop = True
            return
        pending = rollback.pending
        if trainer.world_size > 1:
            pending = trainer.strategy.reduce_boolean_decision(pending, all=False)
        if pending:
            trainer.should_stop = True

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._settle(trainer)  # before Lightning steps its epoch-interval plateau schedulers

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._settle(trainer)
        if self.healing is not None:
            self.healing.end()
        if self._module is not None:
            vars(self._module).pop("optimizer_step", None)  # the class's again
            self._module = None

    def _restore(self, trainer: Any, pl_module: Any, state: _fit_state.FitState) -> None:
        """Put a held copy back in place (``MemoryCheckpoints`` calls it)."""
        _fit_state.restore(trainer, pl_module, state, at_batch_end=self._at_batch_end)
        self._restored = state if self._at_batch_end else None

    def _settle(self, trainer: Any) -> None:
        """After a restore at a batch's end: its step-interval plateau schedulers as the copy
        held them (Lightning stepped them after the batch, on the abandoned batch's metric)."""
        if self._restored is not None:
            state, self._restored = self._restored, None
            _fit_state.restore_step_plateaus(trainer, state)

    def _follow_hook(self) -> None:
        """The TensortapCallback's hook, when it made a new one (a branch after an in-memory
        restore: the rollback records it as such)."""
        hook = Hook.current()
        if hook is not None and hook is not self.rollback.hook:
            self.rollback.follow_hook(hook)

    def _replay_step(self, model: Any, batch: Any) -> Any:
        """A kept step again: ``training_step``'s loss of each of its micro-batches, divided
        by the accumulation as Lightning does, and their backward passes; their sum."""
        window, accumulate = batch
        losses = []
        for data, index in window:
            out = model.training_step(data, index)
            loss = out.get("loss") if isinstance(out, dict) else out
            if not isinstance(loss, torch.Tensor):
                raise InvalidConfigError(
                    "RollbackCallback(budget=...) replays a step through training_step, which "
                    f"must return the loss (or a dict with 'loss'), got {out!r}"
                )
            loss = loss / accumulate if accumulate != 1 else loss
            torch.autograd.backward(loss)
            losses.append(loss.detach())
        return _total(losses)


def _total(losses: list[torch.Tensor]) -> torch.Tensor:
    """The step's loss over its micro-batches, summed in order (the same sum in a replay)."""
    total = losses[0]
    for loss in losses[1:]:
        total = total + loss
    return total


def fit_with_rollback(
    rollback: Rollback,
    make_trainer: Callable[[], Any],
    model: Any,
    ckpt_path: str | None = None,
    **fit_kwargs: Any,
) -> Any:
    """``make_trainer().fit(model, ckpt_path=..., **fit_kwargs)`` until a fit ends without a
    rollback (or the rollback's budget refuses one); each rollback fits again from the
    restored checkpoint. Returns the last ``Trainer``."""
    checkpoints = rollback.checkpoints
    if not isinstance(checkpoints, LightningCheckpoints):
        raise InvalidConfigError(
            "fit_with_rollback restores Lightning's own checkpoints: make the Rollback with "
            f"LightningCheckpoints(<ModelCheckpoint's dirpath>), got {type(checkpoints).__name__}"
        )
    while True:
        done = rollback.rollbacks  # a callback with a budget restores at a batch's end
        trainer = make_trainer()
        trainer.fit(model, ckpt_path=ckpt_path, **fit_kwargs)
        if rollback.should_stop:
            return trainer
        if rollback.rollbacks == done and rollback.restore() is None:
            return trainer
        done_ones = [e for e in rollback.events if e.kind == "rollback"]
        restored = done_ones[-1].restored_step if done_ones else None
        for later in checkpoints.steps():  # one ModelCheckpoint wrote after the restore
            if restored is not None and later > restored:
                checkpoints.forget(later)
        ckpt_path = checkpoints.restore_path
