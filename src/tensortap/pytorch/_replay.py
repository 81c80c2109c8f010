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
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from tensortap.exceptions import InvalidConfigError, ReplayError
from tensortap.pytorch._naming import unwrap

log = logging.getLogger(__name__)

TRANSIENT = "transient"
DATA = "data"
NUMERICS = "numerics"
REPRODUCIBLE = "reproducible"
KINDS = (TRANSIENT, DATA, NUMERICS, REPRODUCIBLE)
EXTREME_INPUT = 1e4  # a batch value larger than this (in magnitude) is extreme
MAX_REPLAYS = 3  # the default budget of replays per replayer


@dataclass(frozen=True)
class Attribution:
    """What a replay says about a failed step.

    ``kind``: :data:`TRANSIENT`, :data:`DATA`, :data:`NUMERICS` or :data:`REPRODUCIBLE`;
    ``first_bad_layer``: the module whose output first went non-finite in the replay (None
    when every output was finite, or for a transient fault); ``evidence``: the numbers it rests
    on (``loss`` and ``replay_loss``, ``grad_norm`` and ``replay_grad_norm``,
    ``fingerprints_differing``, ``batch_nonfinite``, ``batch_max_abs``, ``nonfinite_layers``,
    the first bad layer's ``layer_input_nonfinite``, ``layer_input_max_abs``,
    ``layer_output_nonfinite``, and ``seconds``); ``reason``: why the step was replayed (the
    guard's reason); ``batch``: what names the batch.
    """

    kind: str
    step: int
    first_bad_layer: str | None
    evidence: Mapping[str, float]
    message: str
    reason: str | None = None
    batch: Any = None

    def to_dict(self) -> dict[str, Any]:
        """As JSON values (non-finite numbers as strings; a batch that is not a number or a
        string as its ``repr``)."""
        batch = self.batch
        if not (batch is None or isinstance(batch, (bool, int, float, str))):
            batch = repr(batch)
        return {
            "kind": self.kind,
            "step": self.step,
            "first_bad_layer": self.first_bad_layer,
            "evidence": {k: _json_number(v) for k, v in self.evidence.items()},
            "message": self.message,
            "reason": self.reason,
            "batch": _json_number(batch) if isinstance(batch, float) else batch,
        }


@dataclass(frozen=True)
class ReplayStatus:
    """What a replayer did so far (``Replayer.status``)."""

    captured: int  #: steps captured
    requested: int  #: replays asked for (:meth:`Replayer.on_trip`, :meth:`Replayer.request`)
    replayed: int  #: replays run (each made an attribution)
    refused: int  #: not run: the step was not captured any more, or the weights had changed
    over_budget: int  #: not run: ``max_replays`` or ``max_seconds`` reached
    failed: int  #: replays that raised (logged)
    seconds: float  #: spent replaying


@dataclass
class _RngState:
    cpu: torch.Tensor
    cuda: list[torch.Tensor] | None
    python: Any = None
    numpy: Any = None

    @classmethod
    def take(cls, python: bool, numpy: bool) -> _RngState:
        cuda = None
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            cuda = torch.cuda.get_rng_state_all()  # seeds and offsets, on the host
        return cls(
            torch.get_rng_state(),
            cuda,
            random.getstate() if python else None,
            np.random.get_state() if numpy else None,
        )

    def put(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        if self.python is not None:
            random.setstate(self.python)
        if self.numpy is not None:
            np.random.set_state(self.numpy)


@dataclass
class _Capture:
    step: int
    batch: Any
    batch_id: Any
    rng: _RngState
    versions: list[int]
    training: bool  #: the model's train/eval mode in the step
    #: [loss, norm of each gradient held]: float32, on the device (None before after_backward)
    fingerprint: torch.Tensor | None = None
    has_grad: tuple[bool, ...] = ()
    weights: torch.Tensor | None = None  #: norm of each trained parameter, float32


@dataclass
class _LayerCall:
    name: str
    numbers: torch.Tensor  # input non-finite, input max |x|, output non-finite, output max |x|


@dataclass
class _Replayed:
    fingerprint: torch.Tensor
    has_grad: tuple[bool, ...]
    calls: list[_LayerCall]
    layers: np.ndarray | None  # per call: input non-finite, input max, output non-finite, max
    batch_nonfinite: float
    batch_max: float
    #: under DDP, per rank: batch non-finite, batch max, first bad layer (-1: none), loss bad
    ranks: np.ndarray | None = None


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
        self.max_replays, self.max_seconds, self.rtol = max_replays, max_seconds, float(rtol)
        self.python_rng, self.numpy_rng = python_rng, numpy_rng
        self.extreme_input, self.hook = float(extreme_input), hook
        self.params = [p for p in model.parameters() if p.requires_grad]
        self._captures: deque[_Capture] = deque(maxlen=keep)
        self._requests: deque[_Request] = deque()
        self._lock = threading.Lock()  # on_trip may come from another thread
        self.step = 0  # the next step capture() numbers
        self.attributions: list[Attribution] = []
        self._counts = {"captured": 0, "requested": 0, "refused": 0, "over_budget": 0}
        self._failed = self._runs = 0
        self._seconds = 0.0
        self._guard: Any = None  # a Guard this replayer follows (follow)

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
            _Capture(
                number,
                batch,
                batch_id,
                _RngState.take(self.python_rng, self.numpy_rng),
                [p._version for p in self.params],
                self.model.training,
            )
        )
        self.step = number + 1
        self._counts["captured"] += 1

    def after_backward(self, loss: torch.Tensor) -> None:
        """Right after the step's backward pass (where ``step_fn`` returns): fingerprint the
        loss and the gradients, on the device, without waiting for it."""
        if not self._captures:
            raise InvalidConfigError(
                "Replayer.after_backward: call capture(batch) first, at the step's start"
            )
        capture = self._captures[-1]
        capture.fingerprint, capture.has_grad, capture.weights = self._fingerprint(loss)

    def _fingerprint(self, loss: Any) -> tuple[torch.Tensor, tuple[bool, ...], torch.Tensor]:
        has_grad = tuple(p.grad is not None for p in self.params)
        grads = [p.grad.detach() for p in self.params if p.grad is not None]
        weights = [p.detach() for p in self.params]
        # float32 norms, whatever the dtype: a bfloat16 norm would hide small changes
        norms = torch._foreach_norm(weights + grads, 2, dtype=torch.float32) if weights else []
        value = loss.detach() if isinstance(loss, torch.Tensor) else torch.tensor(float(loss))
        device = value.device
        value = value.float().reshape(-1)
        if value.numel() != 1:
            value = value.sum().reshape(1)
        parts = [n.float().to(device, non_blocking=True).reshape(1) for n in norms]
        fingerprint = torch.cat([value, *parts[len(weights) :]])
        weight_norms = torch.cat(parts[: len(weights)]) if weights else value.new_zeros(0)
        return fingerprint, has_grad, weight_norms

    # -- asking for replays --
    def follow(self, guard: Any) -> None:
        """Replay what ``guard`` trips on: its ``on_trip`` becomes :meth:`on_trip`, and each
        :meth:`before_step` first settles the guard (:meth:`Guard.settle`: the decisions that
        have arrived are read), so a trip of step N is replayed before step N+1 runs, while
        the weights are still step N's (the guard undid its update). On a GPU a decision that
        arrives later than the next update cannot be replayed: the replay is refused and
        counted (``status.refused``)."""
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
            try:
                made.append(self.replay(wanted.step, reason=wanted.reason, batch=wanted.batch))
            except ReplayError as exc:
                log.warning("tensortap replay of step %d not run: %s", wanted.step, exc)
            except Exception:
                with self._lock:
                    self._failed += 1
                log.exception("tensortap replay of step %d failed", wanted.step)

    @property
    def status(self) -> ReplayStatus:
        """Captures, replays asked for, run, refused, over budget and failed; seconds spent."""
        with self._lock:
            return ReplayStatus(
                **self._counts,
                replayed=len(self.attributions),
                failed=self._failed,
                seconds=self._seconds,
            )

    # -- the replay --
    def replay(
        self, step: int | None = None, *, reason: str | None = None, batch: Any = None
    ) -> Attribution:
        """Replay ``step`` (default: the last captured) now, on the training thread, and
        attribute it; raises :class:`~tensortap.exceptions.ReplayError` when it cannot be
        replayed (not captured, weights changed since, no fingerprint, over budget)."""
        capture = self._captured(step)
        self._within_budget(capture.step)
        if capture.fingerprint is None or capture.weights is None:
            self._refuse(
                f"step {capture.step} has no fingerprint: call replayer.after_backward(loss) "
                "right after its backward pass"
            )
        self._check_weights(capture)
        with self._lock:
            self._runs += 1
        started = time.perf_counter()
        try:
            replayed = self._run(capture)
        finally:
            with self._lock:
                self._seconds += time.perf_counter() - started
        attribution = self._attribute(
            capture,
            replayed,
            time.perf_counter() - started,
            reason,
            capture.batch_id if batch is None else batch,
        )
        with self._lock:
            self.attributions.append(attribution)
        log.warning("tensortap replay: %s", attribution.message)
        if self.hook is not None:
            self.hook.record_event("attribution", attribution.to_dict())
        return attribution

    def _refuse(self, why: str) -> None:
        with self._lock:
            self._counts["refused"] += 1
        raise ReplayError(why)

    def _captured(self, step: int | None) -> _Capture:
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

    def _within_budget(self, step: int) -> None:
        spent = self.max_seconds is not None and self._seconds >= self.max_seconds
        if self._runs < self.max_replays and not spent:
            return
        with self._lock:
            self._counts["over_budget"] += 1
            first = self._counts["over_budget"] == 1
        why = (
            f"{self.max_seconds} s spent replaying (max_seconds)"
            if spent
            else f"{self.max_replays} replays made (max_replays)"
        )
        if first:
            log.warning("tensortap replay: %s; later replays are counted, not run", why)
        raise ReplayError(f"step {step} not replayed: {why}")

    def _check_weights(self, capture: _Capture) -> None:
        """The precondition: the weights are those of the step, before its update."""
        moved = [
            i
            for i, (p, v) in enumerate(zip(self.params, capture.versions, strict=True))
            if p._version != v
        ]
        if not moved:
            return
        now = torch._foreach_norm([self.params[i].detach() for i in moved], 2, dtype=torch.float32)
        before = capture.weights
        assert before is not None
        same = all(
            torch.equal(n.float().reshape(()).cpu(), before[i].cpu())
            for n, i in zip(now, moved, strict=True)
        )
        if not same:
            self._refuse(
                f"the weights changed since step {capture.step} (its update was applied, or a "
                "later step's): a replay needs the weights before the step's update. Replay it "
                "before optimizer.step() (the guard skips a tripped step's update; a guard "
                "that records only lets it through)"
            )

    def _run(self, capture: _Capture) -> _Replayed:
        """Run ``step_fn`` as at ``capture``, with forward hooks, and put everything back."""
        model = self.model
        everything = list(model.parameters())
        grads = [p.grad for p in everything]
        buffers = [(name, b, b.detach().clone()) for name, b in model.named_buffers()]
        modes = [(m, m.training) for m in model.modules()]
        rng_now = _RngState.take(self.python_rng, self.numpy_rng)
        versions = [p._version for p in everything]
        calls: list[_LayerCall] = []
        core = unwrap(model)  # layers named as in the unwrapped model (fc1, not module.fc1)
        handles = [
            module.register_forward_hook(_layer_watch(name or type(core).__name__, calls))
            for name, module in core.named_modules()
        ]
        try:
            for p in everything:
                p.grad = None
            if model.training != capture.training:
                model.train(capture.training)  # the step's mode (evaluation ran since?)
            capture.rng.put()
            batch = capture.batch if capture.batch is not None else self._load(capture)
            batch_numbers = _numbers(_tensors(batch))
            with self.hook.ignoring() if self.hook is not None else contextlib.nullcontext():
                loss = self.step_fn(model, batch)
            if not isinstance(loss, (torch.Tensor, float, int)):
                raise ReplayError(
                    f"step_fn must return the step's loss (a tensor), returned {loss!r}"
                )
            fingerprint, has_grad, _ = self._fingerprint(loss)
            layers = (
                torch.stack([c.numbers.double().cpu() for c in calls]).numpy() if calls else None
            )
            nonfinite, largest = (float(v) for v in batch_numbers.tolist())
            replayed = _Replayed(fingerprint, has_grad, calls, layers, nonfinite, largest)
            replayed.ranks = self._across_ranks(replayed)  # inside the replay: every rank's
        finally:
            for handle in handles:
                handle.remove()
            for p, g in zip(everything, grads, strict=True):
                p.grad = g
            with torch.no_grad():
                for name, original, copy in buffers:
                    owner, _, attr = name.rpartition(".")
                    module = model.get_submodule(owner)
                    if module._buffers.get(attr) is not original:
                        module._buffers[attr] = original  # step_fn replaced it
                    original.copy_(copy)
            for module, training in modes:
                module.training = training
            rng_now.put()
        if any(p._version != v for p, v in zip(everything, versions, strict=True)):
            raise ReplayError(
                "step_fn changed the model's weights during the replay (an optimizer.step() "
                "in it?): it must only run the forward and backward passes"
            )
        return replayed

    def _across_ranks(self, replayed: _Replayed) -> np.ndarray | None:
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
        index = _first_bad_index(replayed.layers)
        loss_bad = not math.isfinite(float(replayed.fingerprint[0]))
        rows[dist.get_rank()] = torch.tensor(
            [replayed.batch_nonfinite, replayed.batch_max, index, float(loss_bad)],
            dtype=torch.float64,
        )
        device = self.params[0].device if self.params else torch.device("cpu")
        gathered = rows.to(device)
        dist.all_reduce(gathered)
        return gathered.cpu().numpy()

    def _load(self, capture: _Capture) -> Any:
        assert self.load_batch is not None
        return self.load_batch(capture.batch_id)

    def _attribute(
        self,
        capture: _Capture,
        replayed: _Replayed,
        seconds: float,
        reason: str | None,
        batch: Any,
    ) -> Attribution:
        assert capture.fingerprint is not None
        first = capture.fingerprint.detach().cpu().double().numpy()
        second = replayed.fingerprint.detach().cpu().double().numpy()
        calls, layers = replayed.calls, replayed.layers
        batch_nonfinite, batch_max = replayed.batch_nonfinite, replayed.batch_max
        differing = (
            int(first.size)
            if replayed.has_grad != capture.has_grad or first.size != second.size
            else int((~_same(first, second, self.rtol)).sum())
        )
        evidence: dict[str, float] = {
            "loss": float(first[0]),
            "replay_loss": float(second[0]),
            "grad_norm": float(np.sqrt(np.sum(first[1:] ** 2))),
            "replay_grad_norm": float(np.sqrt(np.sum(second[1:] ** 2))),
            "fingerprints_differing": float(differing),
            "batch_nonfinite": batch_nonfinite,
            "batch_max_abs": batch_max,
            "nonfinite_layers": float(0 if layers is None else int((layers[:, 2] > 0).sum())),
            "seconds": seconds,
        }
        at = f"step {capture.step} replayed from the same weights, RNG state and batch"
        if differing:
            return Attribution(
                TRANSIENT,
                capture.step,
                None,
                evidence,
                f"{at} gave a different result (loss {first[0]:.6g}, replayed {second[0]:.6g}; "
                f"{differing} of {first.size} loss and gradient fingerprints differ): a "
                "transient fault. Suspect the hardware (silent data corruption), or a kernel "
                "that is not deterministic (torch.use_deterministic_algorithms(True))",
                reason,
                batch,
            )
        bad_layer, where = _first_bad_layer(calls, layers, evidence)
        nonfinite = not bool(np.all(np.isfinite(second)))
        if bad_layer is None and nonfinite:
            where = (
                " Every layer's output was finite: the loss, computed after them, went non-finite"
                if not math.isfinite(second[0])
                else " Every layer's output and the loss were finite: the backward pass went "
                "non-finite"
            )
        at = f"{at} gave the same result (loss {second[0]:.6g})"
        local_bad = batch_nonfinite > 0 or batch_max > self.extreme_input or bad_layer is not None
        if replayed.ranks is not None and not local_bad and math.isfinite(second[0]):
            found = self._elsewhere(replayed, capture.step, evidence, at, reason, batch)
            if found is not None:
                return found
        if batch_nonfinite > 0 or batch_max > self.extreme_input:
            what = (
                f"{int(batch_nonfinite)} non-finite values"
                if batch_nonfinite > 0
                else f"a value of magnitude {batch_max:.4g} (over {self.extreme_input:g})"
            )
            return Attribution(
                DATA,
                capture.step,
                bad_layer,
                evidence,
                f"{at}, and the batch holds {what}: the data.{where}",
                reason,
                batch,
            )
        if bad_layer is not None or nonfinite:
            return Attribution(
                NUMERICS,
                capture.step,
                bad_layer,
                evidence,
                f"{at}; the batch is finite (largest magnitude {batch_max:.4g}) and the step "
                f"still goes non-finite: the numerics (an overflow, or a division by ~0).{where}",
                reason,
                batch,
            )
        return Attribution(
            REPRODUCIBLE,
            capture.step,
            None,
            evidence,
            f"{at}; everything stays finite and the batch is moderate (largest magnitude "
            f"{batch_max:.4g}): the data or the numerics, not told apart (a spike the step "
            "causes again)",
            reason,
            batch,
        )

    def _elsewhere(
        self,
        replayed: _Replayed,
        step: int,
        evidence: dict[str, float],
        at: str,
        reason: str | None,
        batch: Any,
    ) -> Attribution | None:
        """This rank's step is sound but its all-reduced gradients are not: the rank whose batch
        (first) or forward pass went bad, from the rows every rank shared."""
        assert replayed.ranks is not None
        for kind in (DATA, NUMERICS):
            for rank, (nonfinite, largest, index, loss_bad) in enumerate(replayed.ranks):
                data = nonfinite > 0 or largest > self.extreme_input
                if (kind == DATA and data) or (kind == NUMERICS and (index >= 0 or loss_bad)):
                    layer = (
                        replayed.calls[int(index)].name
                        if 0 <= index < len(replayed.calls)
                        else None
                    )
                    evidence["bad_rank"] = float(rank)
                    evidence["bad_rank_batch_nonfinite"] = float(nonfinite)
                    evidence["bad_rank_batch_max_abs"] = float(largest)
                    what = (
                        f"rank {rank}'s batch holds non-finite or extreme values "
                        f"({int(nonfinite)} non-finite, largest magnitude {largest:.4g}): the data"
                        if kind == DATA
                        else f"rank {rank}'s step goes non-finite from a finite batch: the numerics"
                    )
                    where = f" (first bad layer there: {layer})" if layer else ""
                    return Attribution(
                        kind,
                        step,
                        layer,
                        evidence,
                        f"{at}; this rank's batch and forward pass are finite, but the "
                        f"gradients, all-reduced, are not: {what}{where}",
                        reason,
                        batch,
                    )
        return None


def _first_bad_index(layers: np.ndarray | None) -> int:
    """The call whose output first went non-finite (first from finite inputs), -1 if none."""
    if layers is None:
        return -1
    bad = [i for i in range(len(layers)) if layers[i, 2] > 0]
    fresh = [i for i in bad if layers[i, 0] == 0]
    return fresh[0] if fresh else (bad[0] if bad else -1)


def _first_bad_layer(
    calls: list[_LayerCall], layers: np.ndarray | None, evidence: dict[str, float]
) -> tuple[str | None, str]:
    """The module whose output first went non-finite (forward hooks fire as modules finish,
    innermost first): the first one with finite inputs, else the first one at all; and a
    sentence saying so."""
    index = _first_bad_index(layers)
    if layers is None:
        return None, ""
    if index < 0:
        return None, " Every layer's output was finite in the forward pass."
    name = calls[index].name
    evidence["layer_input_nonfinite"] = float(layers[index, 0])
    evidence["layer_input_max_abs"] = float(layers[index, 1])
    evidence["layer_output_nonfinite"] = float(layers[index, 2])
    if layers[index, 0] == 0:
        return name, (
            f" The first layer whose output went non-finite: {name} ({int(layers[index, 2])} "
            f"values; its inputs were finite, largest magnitude {layers[index, 1]:.4g})"
        )
    return name, (
        f" The first layer with a non-finite output: {name} (its input was already non-finite: "
        "the batch, or an operation outside a module before it)"
    )


def _layer_watch(name: str, calls: list[_LayerCall]) -> Callable[..., None]:
    def watch(module: nn.Module, args: Any, output: Any) -> None:
        calls.append(
            _LayerCall(name, torch.cat([_numbers(_tensors(args)), _numbers(_tensors(output))]))
        )

    return watch


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """The floating-point tensors in a batch or a module's inputs or outputs."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex():
            yield value.detach()
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def _numbers(tensors: Iterator[torch.Tensor]) -> torch.Tensor:
    """[non-finite count, largest finite magnitude] over ``tensors``, float64 on the CPU
    (the replay's path: it may wait for the device)."""
    nonfinite, largest = 0.0, 0.0
    for t in tensors:
        if t.numel() == 0:
            continue
        finite = torch.isfinite(t)
        nonfinite += float((~finite).sum())
        magnitude = torch.where(
            finite, t.abs(), torch.zeros((), dtype=t.abs().dtype, device=t.device)
        )
        largest = max(largest, float(magnitude.max()))
    return torch.tensor([nonfinite, largest], dtype=torch.float64)


def _same(first: np.ndarray, second: np.ndarray, rtol: float) -> np.ndarray:
    """Element by element: equal (NaN equals NaN, an infinity the same infinity), or within
    ``rtol`` of each other."""
    equal = (first == second) | (np.isnan(first) & np.isnan(second))
    if rtol > 0:
        with np.errstate(invalid="ignore"):
            equal |= np.abs(first - second) <= rtol * np.maximum(np.abs(first), np.abs(second))
    return np.asarray(equal, dtype=bool)


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


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
