"""What trainer callbacks (Hugging Face, Lightning) ask of the PyTorch hook beyond a plain
training loop: steps ended by the trainer, gradients saved when the trainer says they are
ready, forward passes announced or ignored. Mixed into :class:`tensortap.pytorch.Hook`."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from tensortap.core._recorder import StepRecorder
from tensortap.core._stages import StageMarks
from tensortap.core._step_tracker import StepTracker
from tensortap.pytorch._naming import unwrap
from tensortap.pytorch._registry import Registry
from tensortap.pytorch._vitals import StepVitals


class TrainerControls:
    """The hook's methods for trainer callbacks (see the module docstring)."""

    _lock: threading.RLock
    _closed: bool
    _recorder: StepRecorder
    _tracker: StepTracker
    _models: list[nn.Module]
    _names: Any  # WeakKeyDictionary[nn.Module, ModuleNames]
    _explicit_gradients: bool
    _paused: bool
    _losses_on_request: bool
    _backward_losses: Callable[[torch.Tensor], None] | None
    _vitals: StepVitals
    _registry: Registry
    _stages: StageMarks

    if TYPE_CHECKING:  # provided by the hook (stubs here would shadow them)

        @property
        def recorder(self) -> StepRecorder: ...
        def _guard_event(self, fn: Any, *args: Any) -> Any: ...
        def _save_gradients(self, unscale: bool) -> None: ...
        def before_model_forward(self, module: nn.Module, inputs: Any) -> None: ...

    def watches(self, module: nn.Module) -> bool:
        """Whether ``module`` (or the model it wraps) is registered."""
        core = unwrap(module)
        return any(m is module for m in self._models) or (
            core in self._names and not self._names[core].loss
        )

    def stop_automatic_steps(self) -> None:
        """Steps end only at :meth:`next_step` from now on (what trainer callbacks use)."""
        with self._lock:
            self._tracker.stop_automatic()

    def save_gradients(self) -> None:
        """Save the registered models' gradients now (if due). From the first call on (or
        :meth:`gradients_on_request`) they are saved only so: for trainers whose
        ``optimizer.step(closure)`` runs the backward pass inside the step, after the hook's
        pre-step callback (Lightning)."""
        with self._lock:
            self._explicit_gradients = True
            if not self._closed and not self._paused:
                self._guard_event(self._vitals.on_gradients, (e[1] for e in self._registry.params))
            if not self._closed and self._recorder.is_anything_due():
                self._guard_event(self._save_gradients, False)

    def count_samples(self, n: int) -> None:
        """The trainer's count of the samples this TRAIN step trains on (for
        ``vitals/samples_per_second``), when the model's inputs do not show it."""
        with self._lock:
            self._vitals.count_samples(n)

    def pause(self) -> None:
        """Ignore forward passes (and the backward passes through them) until :meth:`resume`
        (a trainer's sanity check, say)."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False

    @contextlib.contextmanager
    def ignoring(self) -> Iterator[None]:
        """Ignore the passes made inside the block (a replay of a step: see
        :mod:`tensortap.pytorch._replay`), then go back to what the hook did before."""
        was = self._paused
        self._paused = True
        try:
            yield
        finally:
            self._paused = was

    def gradients_on_request(self) -> None:
        """Gradients are saved only by :meth:`save_gradients` from now on."""
        self._explicit_gradients = True

    def losses_on_request(self) -> None:
        """The loss is saved only by :meth:`record_loss` from now on, not taken from the
        backward pass (a trainer callback knows the step's loss better)."""
        self._losses_on_request = True

    def continue_after(self, other: TrainerControls) -> None:
        """Write on after ``other``, the closed hook of an earlier session of the same trial
        and worker (an evaluation after training ended): steps numbered after every step of
        ``other``'s, and collections holding the tensors ``other``'s held (readers take a
        worker's collections from its newest snapshot, so this one's must not forget them)."""
        with self._lock:
            self._recorder.continue_after(other.recorder)
            for collection in other.recorder.collections:
                self._recorder.collections.get(collection.name).add(collection.tensor_names)

    def losses_from_backward(self, listener: Callable[[torch.Tensor], None]) -> None:
        """Hand ``listener`` the loss of every backward pass through a registered model (a 0-d
        tensor, detached, unscaled if a GradScaler is registered) instead of saving it: what
        went into ``backward()`` is what the trainer optimises, whoever computed it (the model,
        a label smoother, a ``compute_loss`` of the user's), already divided for gradient
        accumulation and scaled as the trainer reports it. The listener must not raise."""
        self._losses_on_request = True
        self._backward_losses = listener

    def fit_begins(self, model: nn.Module) -> bool:
        """A trainer begins fitting ``model``: True when the last fit of this hook's trial and
        worker in this process (any session's) trained another model. Whether that begins a
        new stage is the trainer's to say (:meth:`begin_stage`): a fit from its first step
        does (a fine-tuning after a pre-training), a resumed one does not."""
        with self._lock:
            return self._stages.fit_begins(unwrap(model))

    def begin_stage(self) -> None:
        """A new stage of training begins (a fit of another model from its first step): the
        training-loop fact ``stage`` is saved at its first TRAIN step, where the rules that
        compare losses over time start again."""
        with self._lock:
            self._stages.begin()

    def forward_starts(self, module: nn.Module) -> None:
        """Tell the hook a training or evaluation batch of ``module`` (registered) begins, for
        trainers whose steps may never call the registered module itself (a LightningModule
        whose ``training_step`` calls ``self.net(x)``)."""
        self.before_model_forward(module, ())
