"""Attribution by replay: why did a step fail? Run it again and see.

A step the guard tripped on is run a second time from the same weights, the same RNG state and
the same batch, and its loss and gradients are compared with the first run's:

- they differ: **transient** (suspect the hardware: silent data corruption, a flipped bit; or a
  kernel that is not deterministic);
- they are the same: the step fails again for a reason it carries, and the replay (with forward
  hooks, during the replay only) says which layer first went non-finite. A batch holding
  non-finite or extreme values is **data**; finite inputs that overflow (or divide by ~0) are
  **numerics**; a step that reproduces with everything finite and a moderate batch is
  **reproducible** (data or numerics, not told apart: a spike the batch causes again).

::

    replayer = tt.Replayer(model, step_fn, hook=hook)      # step_fn(model, batch) -> loss
    guard = tt.Guard(optimizer, model, on_trip=replayer.on_trip)
    for i, batch in enumerate(loader):
        replayer.capture(batch, batch_id=i)  # runs the replays asked for, then saves RNG states
        loss = step_fn(model, batch)         # forward and backward
        replayer.after_backward(loss)        # the loss's and gradients' fingerprint, on the device
        optimizer.step()                     # the guard skips a tripped step's update

What it costs per step (the normal path): the CPU generator's state (5 KB copied on the host),
the CUDA generators' (seed and offset, no device work), one Python int per parameter (its
version counter), a reference to the batch, and in :meth:`Replayer.after_backward` one fused
``torch._foreach_norm`` over the trained parameters and their gradients, stacked into one small
float32 tensor that stays on the device: no host synchronisation. The last ``keep`` steps are
kept. A replay costs one more forward and backward pass, the gradients' memory once more, and a
copy of the model's buffers; at most ``max_replays`` replays run per replayer (and none once
``max_seconds`` were spent replaying).

The replay needs the weights of the step, before its update: the guard skips a tripped step's
update, so they are the current ones. That is checked: each trained parameter's version counter
(bumped by every in-place change, such as an optimizer's) must not have moved since the step was
captured, or, where it moved, the weights' fingerprint must be bitwise the one taken after the
step's backward pass (an update multiplied by 0 changes nothing). Otherwise the replay is refused
(:class:`~tensortap.exceptions.ReplayError`).

After a replay, the model, the optimizer and every RNG are as they were before it: the
gradients held before are put back (the replay's are dropped), buffers (BatchNorm's running
statistics) are copied back, train/eval flags restored, the RNG states restored, and a
tensortap hook given as ``hook`` ignores the replay's passes. ``step_fn`` must not call
``optimizer.step()`` (a replay that changed the weights raises ReplayError).

The pieces: what is kept of each step (:mod:`~tensortap.pytorch._replay_capture`), the state
put back after a replay (:mod:`~tensortap.pytorch._replay_state`), the attribution of its
outcome (:mod:`~tensortap.pytorch._replay_attribution`) and the budget
(:mod:`~tensortap.pytorch._replay_budget`); here, the :class:`Replayer` that runs them.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from tensortap.exceptions import InvalidConfigError, ReplayError
from tensortap.pytorch._naming import unwrap
from tensortap.pytorch._replay_attribution import (
    DATA,
    EXTREME_INPUT,
    KINDS,
    NUMERICS,
    REPRODUCIBLE,
    TRANSIENT,
    Attribution,
    FirstRun,
    LayerCall,
    Replayed,
    attribute,
    first_bad_index,
    layer_watch,
    numbers,
    tensors,
)
from tensortap.pytorch._replay_budget import MAX_REPLAYS, ReplayBudget
from tensortap.pytorch._replay_capture import (
    Capture,
    batch_marks,
    batch_overwritten,
    fingerprint,
    weights_unchanged,
)
from tensortap.pytorch._replay_state import RngState, model_put_back

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplayStatus:
    """What a replayer did so far (``Replayer.status``)."""

    captured: int  #: steps captured
    requested: int  #: replays asked for (:meth:`Replayer.on_trip`, :meth:`Replayer.request`)
    replayed: int  #: replays run (each made an attribution)
    refused: int  #: not run: the step was not captured any more, or the weights had changed
    over_budget: int  #: not run: ``max_replays`` or ``max_seconds`` reached
    failed: int  #: replays that ran and failed: step_fn raised, returned no loss, or changed
    #: the weights (logged; each still counts against ``max_replays``). Once the queue is run,
    #: ``requested == replayed + refused + over_budget + failed``
    seconds: float  #: spent replaying


@dataclass
class _Request:
    step: int
    reason: str | None
    batch: Any


class Replayer:
    """Replays a failed step to attribute its failure (see the module docstring).

    ``step_fn(model, batch) -> loss`` runs one step's forward and backward passes, as the
    training loop does (no ``optimizer.step()``, no ``zero_grad`` needed: gradients start
    empty in a replay). ``load_batch(batch_id)`` gives the batch again when :meth:`capture`
    is given ``batch_id`` and no batch (so no reference to it is kept). ``keep``: how many
    recent steps can be replayed. ``max_replays`` and ``max_seconds``: the budget. ``rtol``:
    0 compares the fingerprints bitwise (use a small value, or
    ``torch.use_deterministic_algorithms(True)``, where kernels are not deterministic).
    ``python_rng``/``numpy_rng``: also save and restore Python's and NumPy's global
    generators (when the step draws from them). ``extreme_input``: a batch value larger in
    magnitude makes the batch extreme. ``hook``: a tensortap hook that ignores the replays
    and records each attribution in its trial (``trial.sessions()[i].events``).
    """

    def __init__(
        self,
        model: nn.Module,
        step_fn: Callable[[nn.Module, Any], Any],
        *,
        load_batch: Callable[[Any], Any] | None = None,
        keep: int = 4,
        max_replays: int = MAX_REPLAYS,
        max_seconds: float | None = None,
        rtol: float = 0.0,
        python_rng: bool = False,
        numpy_rng: bool = False,
        extreme_input: float = EXTREME_INPUT,
        hook: Any = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise InvalidConfigError(
                f"Replayer needs the torch.nn.Module it replays, got {model!r}"
            )
        if not callable(step_fn):
            raise InvalidConfigError(
                "Replayer needs step_fn(model, batch) -> loss, the step's forward and backward "
                f"passes; got {step_fn!r}"
            )
        if load_batch is not None and not callable(load_batch):
            raise InvalidConfigError(f"load_batch must be callable(batch_id), got {load_batch!r}")
        for label, count, low in (("keep", keep, 1), ("max_replays", max_replays, 0)):
            if isinstance(count, bool) or not isinstance(count, int) or count < low:
                raise InvalidConfigError(f"Replayer {label} must be an int >= {low}, got {count!r}")
        for label, number in (("rtol", rtol), ("extreme_input", extreme_input)):
            if isinstance(number, bool) or not isinstance(number, (int, float)) or number < 0:
                raise InvalidConfigError(f"Replayer {label} must be a number >= 0, got {number!r}")
        if max_seconds is not None and not (
            isinstance(max_seconds, (int, float)) and max_seconds > 0
        ):
            raise InvalidConfigError(
                f"Replayer max_seconds must be a number > 0 or None, got {max_seconds!r}"
            )
        if hook is not None and not (hasattr(hook, "record_event") and hasattr(hook, "ignoring")):
            raise InvalidConfigError(
                f"Replayer hook must be a tensortap.pytorch.Hook, got {hook!r}"
            )
        self.model, self.step_fn, self.load_batch = model, step_fn, load_batch
        self.budget = ReplayBudget(max_replays, max_seconds)
        self.rtol = float(rtol)
        self.python_rng, self.numpy_rng = python_rng, numpy_rng
        self.extreme_input, self.hook = float(extreme_input), hook
        self.params = [p for p in model.parameters() if p.requires_grad]
        self._captures: deque[Capture] = deque(maxlen=keep)
        self._requests: deque[_Request] = deque()
        self._lock = threading.Lock()  # on_trip may come from another thread
        self.step = 0  # the next step capture() numbers
        self.attributions: list[Attribution] = []
        self._counts = {"captured": 0, "requested": 0, "refused": 0}
        self._failed = 0
        self._guard: Any = None  # a Guard this replayer follows (follow)
        self._rollback: Any = None  # a Rollback whose restores this replayer runs before
        self._clip_told = False  # logged once: after_backward came after a gradient clip

    # -- the normal path --
    def capture(self, batch: Any = None, *, batch_id: Any = None, step: int | None = None) -> None:
        """At the start of a step, before its forward pass: first run the replays asked for
        (:meth:`before_step`), then save what replaying this step needs. ``batch``: the
        batch (kept by reference: a loader that refills the same tensors needs ``batch_id``
        and ``load_batch`` instead); ``step``: its number (default: one more than the last,
        from 0, as the guard counts)."""
        self.before_step()
        if batch is None and (batch_id is None or self.load_batch is None):
            raise InvalidConfigError(
                "Replayer.capture needs the batch, or batch_id with the replayer's load_batch"
            )
        number = self.step if step is None else int(step)
        self._captures.append(
            Capture(
                number,
                batch,
                batch_id,
                RngState.take(self.python_rng, self.numpy_rng),
                [p._version for p in self.params],
                self.model.training,
                batch_marks=batch_marks(batch),
            )
        )
        self.step = number + 1
        self._counts["captured"] += 1
        self._captures[-1].restores = self._restores()

    def after_backward(self, loss: torch.Tensor) -> None:
        """Right after the step's backward pass (where ``step_fn`` returns), before any
        gradient clipping or unscaling: fingerprint the loss and the gradients, on the device,
        without waiting for it. (Gradients clipped first are still recognised, as the replay's
        times one factor, and a warning says so once.)"""
        if not self._captures:
            raise InvalidConfigError(
                "Replayer.after_backward: call capture(batch) first, at the step's start"
            )
        capture = self._captures[-1]
        capture.fingerprint, capture.has_grad, capture.weights = fingerprint(self.params, loss)
        # the batch as the step left it: its own in-place changes (labels masked) are its own
        capture.batch_marks = batch_marks(capture.batch)

    # -- asking for replays --
    def follow(self, guard: Any, *, rollback: Any = None) -> None:
        """Replay what ``guard`` trips on: its ``on_trip`` becomes :meth:`on_trip`, and each
        :meth:`before_step` first settles the guard (:meth:`Guard.settle`: the decisions that
        have arrived are read), so a trip of step N is replayed before step N+1 runs, while
        the weights are still step N's (the guard undid its update). On a GPU a decision that
        arrives later than the next update cannot be replayed: the replay is refused and
        counted (``status.refused``).

        ``rollback``: the :class:`~tensortap.pytorch.Rollback` the guard's skip budget asks.
        Its :meth:`~tensortap.pytorch.Rollback.restore` then runs :meth:`before_step` first,
        so the trip that spends the budget is replayed before the checkpoint is loaded (not
        refused after), and attributions are recorded in ``rollback.hook``, the current
        session (after a rollback, the branch's)."""
        if rollback is not None and not hasattr(rollback, "register_before_restore"):
            raise InvalidConfigError(
                f"Replayer.follow(rollback=...) needs a tensortap Rollback, got {rollback!r}"
            )
        if getattr(guard, "on_trip", None) not in (None, self.on_trip) or not hasattr(
            guard, "settle"
        ):
            raise InvalidConfigError(
                f"Replayer.follow needs a tensortap Guard without an on_trip of its own, got "
                f"{guard!r} (on_trip={getattr(guard, 'on_trip', None)!r}); pass "
                "on_trip=replayer.on_trip yourself to call both"
            )
        guard.on_trip = self.on_trip
        self._guard = guard
        if rollback is not None:
            rollback.register_before_restore(self.before_step)
            self._rollback = rollback

    def on_trip(self, event: Any) -> None:
        """The guard's ``on_trip``: queue a replay of ``event.step`` (with ``event.reason``
        and ``event.batch``), run at the next step boundary (:meth:`capture` or
        :meth:`before_step`) on the training thread. Safe from any thread."""
        self.request(int(event.step), getattr(event, "reason", None), getattr(event, "batch", None))

    def request(self, step: int, reason: str | None = None, batch: Any = None) -> None:
        """Queue a replay of ``step`` (see :meth:`on_trip`)."""
        with self._lock:
            self._requests.append(_Request(step, reason, batch))
            self._counts["requested"] += 1

    def before_step(self) -> list[Attribution]:
        """Run the queued replays (on the training thread, between steps); never raises: a
        replay refused or failed is logged and counted in :attr:`status`. Returns the
        attributions made."""
        if self._guard is not None:
            self._guard.settle()
        made: list[Attribution] = []
        while True:
            with self._lock:
                if not self._requests:
                    return made
                wanted = self._requests.popleft()
            failed = self._failed
            try:
                made.append(self.replay(wanted.step, reason=wanted.reason, batch=wanted.batch))
            except Exception as exc:
                with self._lock:  # refused and over budget are counted where raised
                    ran = self._failed > failed
                    if not ran and not isinstance(exc, ReplayError):
                        self._failed += 1
                        ran = True
                if ran:
                    log.exception("tensortap replay of step %d failed", wanted.step)
                else:
                    log.warning("tensortap replay of step %d not run: %s", wanted.step, exc)

    @property
    def status(self) -> ReplayStatus:
        """Captures, replays asked for, run, refused, over budget and failed; seconds spent."""
        with self._lock:
            return ReplayStatus(
                **self._counts,
                replayed=len(self.attributions),
                failed=self._failed,
                over_budget=self.budget.over_budget,
                seconds=self.budget.seconds,
            )

    # -- the replay --
    def replay(
        self, step: int | None = None, *, reason: str | None = None, batch: Any = None
    ) -> Attribution:
        """Replay ``step`` (default: the last captured) now, on the training thread, and
        attribute it; raises :class:`~tensortap.exceptions.ReplayError` when it cannot be
        replayed (not captured, weights changed since, no fingerprint, over budget)."""
        capture = self._captured(step)
        self.budget.check(capture.step)
        if capture.fingerprint is None or capture.weights is None:
            self._refuse(
                f"step {capture.step} has no fingerprint: call replayer.after_backward(loss) "
                "right after its backward pass"
            )
        if not weights_unchanged(self.params, capture):
            if self._restores() > capture.restores:
                self._refuse(
                    f"the weights changed since step {capture.step}: a rollback restored a "
                    "checkpoint since. Replays run before the rollback restores when the "
                    "replayer follows it: replayer.follow(guard, rollback=rollback)"
                )
            self._refuse(
                f"the weights changed since step {capture.step} (its update was applied, a "
                "later step's, or a checkpoint was loaded): a replay needs the weights before "
                "the step's update. Replay it before optimizer.step() (the guard skips a "
                "tripped step's update; a guard that records only lets it through)"
            )
        if batch_overwritten(capture):
            if self.load_batch is None or capture.batch_id is None:
                self._refuse(
                    f"the batch of step {capture.step} was changed in place since it was "
                    "captured (a loader that refills one input buffer). Replayed, it would be "
                    "another batch, and the step would read as a transient (hardware) fault. "
                    "Give capture a copy of the batch, or batch_id= with the replayer's "
                    "load_batch="
                )
            capture.batch = None  # replay it from load_batch(batch_id)
        self.budget.start()
        started = time.perf_counter()
        try:
            replayed = self._run(capture)
            assert capture.fingerprint is not None
            attribution = attribute(
                FirstRun(capture.step, capture.fingerprint, capture.has_grad),
                replayed,
                seconds=time.perf_counter() - started,
                reason=reason,
                batch=capture.batch_id if batch is None else batch,
                rtol=self.rtol,
                extreme_input=self.extreme_input,
            )
        except Exception:  # it ran and failed (step_fn raised, gave no loss, stepped)
            with self._lock:
                self._failed += 1
            raise
        finally:
            self.budget.spend(time.perf_counter() - started)
        with self._lock:
            self.attributions.append(attribution)
        log.warning("tensortap replay: %s", attribution.message)
        if "grad_clip_factor" in attribution.evidence and not self._clip_told:
            self._clip_told = True
            log.warning(
                "tensortap replay: step %d's gradients were clipped before "
                "replayer.after_backward(loss) fingerprinted them (they are the replay's times "
                "%.4g); call after_backward right after loss.backward(), before "
                "clip_grad_norm_, so the fingerprints compare alike",
                capture.step,
                attribution.evidence["grad_clip_factor"],
            )
        hook = self._hook()
        if hook is not None:
            hook.record_event("attribution", attribution.to_dict())
        if self._rollback is not None:  # its next decision hears the evidence
            self._rollback.attributed(attribution)
        return attribution

    def _hook(self) -> Any:
        """Where attributions go: the rollback's current hook when following one (after a
        rollback, the branch's session), else ``hook``."""
        if self._rollback is not None and self._rollback.hook is not None:
            return self._rollback.hook
        return self.hook

    def _restores(self) -> int:
        """Rollbacks done by the rollback followed (0 without one)."""
        return 0 if self._rollback is None else int(self._rollback.rollbacks)

    def _refuse(self, why: str) -> None:
        with self._lock:
            self._counts["refused"] += 1
        raise ReplayError(why)

    def _captured(self, step: int | None) -> Capture:
        if not self._captures:
            self._refuse("no step was captured: call replayer.capture(batch) at each step's start")
        if step is None:
            return self._captures[-1]
        for capture in self._captures:
            if capture.step == step:
                return capture
        held = [c.step for c in self._captures]
        self._refuse(
            f"step {step} is not held (the replayer keeps the last {self._captures.maxlen} "
            f"steps: {held}); ask for a replay before the next update, or raise keep"
        )
        raise AssertionError  # unreachable: _refuse raised

    def _run(self, capture: Capture) -> Replayed:
        """Run ``step_fn`` as at ``capture``, with forward hooks, and put everything back."""
        model = self.model
        calls: list[LayerCall] = []
        core = unwrap(model)  # layers named as in the unwrapped model (fc1, not module.fc1)
        handles = [
            module.register_forward_hook(layer_watch(name or type(core).__name__, calls))
            for name, module in core.named_modules()
        ]
        try:
            with model_put_back(model, RngState.take(self.python_rng, self.numpy_rng)):
                if model.training != capture.training:
                    model.train(capture.training)  # the step's mode (evaluation ran since?)
                capture.rng.put()
                batch = capture.batch if capture.batch is not None else self._load(capture)
                batch_numbers = numbers(tensors(batch))
                hook = self._hook()
                with hook.ignoring() if hook is not None else contextlib.nullcontext():
                    loss = self.step_fn(model, batch)
                if not isinstance(loss, (torch.Tensor, float, int)):
                    raise ReplayError(
                        f"step_fn must return the step's loss (a tensor), returned {loss!r}"
                    )
                prints, has_grad, _ = fingerprint(self.params, loss)
                layers = (
                    torch.stack([c.numbers.double().cpu() for c in calls]).numpy()
                    if calls
                    else None
                )
                nonfinite, largest = (float(v) for v in batch_numbers.tolist())
                replayed = Replayed(prints, has_grad, calls, layers, nonfinite, largest)
                replayed.ranks = self._across_ranks(replayed)  # inside the replay: every rank's
        finally:
            for handle in handles:
                handle.remove()
        return replayed

    def _across_ranks(self, replayed: Replayed) -> np.ndarray | None:
        """Under DistributedDataParallel (gradients all-reduced, so a bad batch on one rank
        makes every rank's gradients bad): every rank's batch numbers and first bad layer, by
        one all-reduce (every rank replays the same step: the guard trips alike)."""
        dist = torch.distributed
        if not (
            isinstance(self.model, nn.parallel.DistributedDataParallel)
            and dist.is_available()
            and dist.is_initialized()
        ):
            return None
        rows = torch.zeros(dist.get_world_size(), 4, dtype=torch.float64)
        index = first_bad_index(replayed.layers)
        loss_bad = not math.isfinite(float(replayed.fingerprint[0]))
        rows[dist.get_rank()] = torch.tensor(
            [replayed.batch_nonfinite, replayed.batch_max, index, float(loss_bad)],
            dtype=torch.float64,
        )
        device = self.params[0].device if self.params else torch.device("cpu")
        gathered = rows.to(device)
        dist.all_reduce(gathered)
        return gathered.cpu().numpy()

    def _load(self, capture: Capture) -> Any:
        assert self.load_batch is not None
        return self.load_batch(capture.batch_id)


__all__ = [
    "DATA",
    "EXTREME_INPUT",
    "KINDS",
    "MAX_REPLAYS",
    "NUMERICS",
    "REPRODUCIBLE",
    "TRANSIENT",
    "Attribution",
    "ReplayStatus",
    "Replayer",
]
