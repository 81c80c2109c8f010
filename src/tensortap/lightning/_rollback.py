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
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from lightning.pytorch.callbacks.callback import Callback

from tensortap.exceptions import CheckpointError, InvalidConfigError
from tensortap.healing._rollback import Rollback
from tensortap.pytorch._hook import Hook

_STEP = re.compile(r"(?:^|[-_])step=(\d+)")


def step_of(name: str) -> int | None:
    """The ``step=<n>`` in a checkpoint's file name, or None."""
    match = _STEP.search(name)
    return None if match is None else int(match.group(1))


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
            match = _STEP.search(name)
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


class RollbackCallback(Callback):
    """Connects a :class:`~tensortap.pytorch.Rollback` to Lightning's ``Trainer``: tells it which
    batch each step trains, stops the fit after the batch during which a rollback was
    requested (agreed by every rank under DDP: one reduction per step), and records the next
    fit's tensortap session as the branch."""

    def __init__(self, rollback: Rollback) -> None:
        self.rollback = rollback

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        hook = Hook.current()  # the TensortapCallback's, made at on_fit_start
        if hook is not None:
            self.rollback.follow_hook(hook)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, index: int) -> None:
        batches = self.rollback.batches
        self.rollback.trained(trainer.global_step, batches.take() if batches else index)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        pending = self.rollback.pending
        if trainer.world_size > 1:
            pending = trainer.strategy.reduce_boolean_decision(pending, all=False)
        if pending:
            trainer.should_stop = True


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
        trainer = make_trainer()
        trainer.fit(model, ckpt_path=ckpt_path, **fit_kwargs)
        if rollback.restore() is None:
            return trainer
        ckpt_path = checkpoints.restore_path
