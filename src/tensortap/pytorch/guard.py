"""A guard inside the training step: right before ``optimizer.step()`` it checks the loss and
the gradients for NaN/Inf and for spikes against a robust running baseline, and acts before a
bad batch can spoil the weights.

::

    guard = tt.Guard(optimizer, model, action="skip", flight_recorder="runs/job1/flight", keep=5)
    for batch_index, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        guard.observe(loss, batch=batch_index)   # optional: the loss and the batch's identity
        optimizer.step()                         # skipped when the guard trips
        if guard.should_stop:
            break

What it costs: one fused norm over all gradients (``torch._foreach_norm``), one finiteness
test, and one device-to-host copy of two numbers per step. Under ``torch.distributed``, one
all-reduce of those numbers makes every rank reach the same decision. With a ``GradScaler``
nothing is needed: ``scaler.step(optimizer)`` unscales the gradients before it calls
``optimizer.step()``, so the guard judges true norms, and the steps the scaler skips because
their gradients overflowed never reach the guard.

Actions when it trips:

- ``"skip"`` (default): the update is skipped. Every gradient is set to ``None``, so
  ``optimizer.step()`` leaves weights and optimizer state as they were.
- ``"stop"``: the update is skipped and :attr:`should_stop` is set.
- ``"record"``: the event is recorded and the update goes ahead.

Every trip is kept in :attr:`events` (step, reason, batch, loss, gradient norm). With
``flight_recorder``, the last ``keep`` steps' parameters and gradients (copied to the CPU each
step; choose ``names`` to keep fewer) are written as a trial when the guard trips, together
with the offending step, as ``create_trial(f"{flight_recorder}/trip-{step}")`` (also listed in
:attr:`recorded`).

The flight recorder has a budget: at most ``max_recordings`` (3) recordings per guard. The
first ones are kept and later trips are counted, not recorded: the first recording holds the
healthy steps before the fault (a run of bad batches trips on every one of them), and nothing
already written is deleted. Recordings are written on a background thread, so a trip costs the
training thread only the hand-over of the ring buffer (already on the CPU); :meth:`flush` waits
for them, and :attr:`status` counts trips, recordings, skipped and failed ones, and the bytes
written.
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from tensortap.core.baseline import RobustBaseline
from tensortap.exceptions import InvalidConfigError

log = logging.getLogger(__name__)

ACTIONS = ("skip", "stop", "record")
MAX_RECORDINGS = 3  # the flight recorder's default budget per guard


@dataclass(frozen=True)
class GuardStatus:
    """What the guard did so far (``Guard.status``)."""

    trips: int  #: how many times it tripped
    skipped_updates: int  #: updates it skipped ("skip" and "stop")
    recordings: int  #: flight recordings written (each a trial under ``flight_recorder``)
    recordings_pending: int  #: handed to the background thread, not written yet
    recordings_over_budget: int  #: trips not recorded because ``max_recordings`` were made
    recordings_failed: int  #: recordings that could not be written (logged)
    recording_bytes: int  #: bytes of values the written recordings hold


@dataclass(frozen=True)
class GuardEvent:
    """One trip of the guard."""

    step: int
    reason: str
    batch: Any = None
    loss: float | None = None
    grad_norm: float | None = None


@dataclass
class _Snapshot:
    step: int
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)


class Guard:
    """See the module docstring. ``spike_z``: how many robust standard deviations above the
    median of the last ``window`` accepted steps a loss or gradient norm must be to be a spike,
    and at least ``spike_ratio`` times that median; no spike is judged before ``warmup`` steps."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        model: torch.nn.Module | None = None,
        action: str = "skip",
        spike_z: float = 6.0,
        spike_ratio: float = 2.0,
        window: int = 50,
        warmup: int = 10,
        flight_recorder: str | os.PathLike[str] | None = None,
        keep: int = 5,
        names: str | None = None,
        max_recordings: int = MAX_RECORDINGS,
    ) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise InvalidConfigError(
                f"Guard needs the torch.optim.Optimizer whose step it guards, got {optimizer!r}"
            )
        if action not in ACTIONS:
            raise InvalidConfigError(f"Guard action must be one of {ACTIONS}, got {action!r}")
        for label, value, low in (("spike_z", spike_z, 0), ("spike_ratio", spike_ratio, 1)):
            if not (isinstance(value, (int, float)) and value > low):
                raise InvalidConfigError(f"Guard {label} must be a number > {low}, got {value!r}")
        for label, count in (("window", window), ("warmup", warmup), ("keep", keep)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise InvalidConfigError(f"Guard {label} must be an int >= 1, got {count!r}")
        if (
            isinstance(max_recordings, bool)
            or not isinstance(max_recordings, int)
            or max_recordings < 0
        ):
            raise InvalidConfigError(
                "Guard max_recordings must be an int >= 0 (how many flight recordings at most; "
                f"0 records none), got {max_recordings!r}"
            )
        if flight_recorder is not None and model is None:
            raise InvalidConfigError("Guard's flight_recorder needs the model (its parameters)")
        self.optimizer, self.action = optimizer, action
        self.spike_z, self.spike_ratio, self.warmup = spike_z, spike_ratio, warmup
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        self._names = {id(p): n for n, p in model.named_parameters()} if model is not None else {}
        try:
            self._keep_name = re.compile(names).search if names else (lambda _n: True)
        except re.error as exc:
            raise InvalidConfigError(f"Guard names must be a regex, got {names!r}: {exc}") from None
        self.flight_recorder = None if flight_recorder is None else os.fspath(flight_recorder)
        self._ring: deque[_Snapshot] = deque(maxlen=keep)
        self._losses, self._norms = RobustBaseline(window), RobustBaseline(window)
        self._loss: torch.Tensor | None = None
        self._batch: Any = None
        self.step = 0
        self.events: list[GuardEvent] = []
        self.max_recordings = max_recordings
        self.recorded: list[str] = []  # the flight recorder's trials, in the order written
        self._recording = threading.Lock()  # guards the counters the background thread moves
        self._recorder: ThreadPoolExecutor | None = None  # made at the first recording
        self._pending: list[Future[None]] = []
        self._started = self._over_budget = self._failed = self._bytes = 0
        self.skipped = 0
        self.should_stop = False
        self.last: tuple[float, float] | None = None  # the last step's (loss, gradient norm)
        self._handle = optimizer.register_step_pre_hook(self._before_step)

    def observe(self, loss: torch.Tensor | float, batch: Any = None) -> None:
        """The step's loss (judged with the gradients) and whatever names its batch."""
        self._loss = loss.detach() if isinstance(loss, torch.Tensor) else torch.tensor(loss)
        self._batch = batch

    def remove(self, timeout: float | None = 60.0) -> bool:
        """Stop guarding (the optimizer's pre-hook is removed) and wait up to ``timeout``
        seconds for the flight recordings still being written (see :meth:`flush`)."""
        self._handle.remove()
        done = self.flush(timeout)
        if self._recorder is not None:
            self._recorder.shutdown(wait=False)  # what is still running finishes on its own
            self._recorder = None
        return done

    def flush(self, timeout: float | None = 60.0) -> bool:
        """Wait up to ``timeout`` seconds (None: for ever) for the flight recordings handed
        to the background thread; whether all of them are written (or failed, see
        :attr:`status`)."""
        with self._recording:
            pending = list(self._pending)
        deadline = None if timeout is None else time.monotonic() + timeout
        for future in pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                future.result(left)
            except TimeoutError:
                return False
        return True

    @property
    def status(self) -> GuardStatus:
        """Trips, skipped updates, and the flight recorder's recordings and bytes so far."""
        with self._recording:
            pending = sum(not f.done() for f in self._pending)
            return GuardStatus(
                trips=len(self.events),
                skipped_updates=self.skipped,
                recordings=len(self.recorded),
                recordings_pending=pending,
                recordings_over_budget=self._over_budget,
                recordings_failed=self._failed,
                recording_bytes=self._bytes,
            )

    # -- inside optimizer.step() --
    def _measure(self) -> tuple[float, float]:
        """(loss, total gradient norm) with one copy to the host."""
        grads = [p.grad for p in self.params if p.grad is not None]
        device = grads[0].device if grads else torch.device("cpu")
        norm = (
            torch.linalg.vector_norm(torch.stack([n.float() for n in torch._foreach_norm(grads)]))
            if grads
            else torch.zeros((), device=device)
        )
        loss = (
            self._loss.to(device).float().reshape(-1)[0]
            if self._loss is not None and self._loss.numel()
            else torch.zeros((), device=device)
        )
        numbers = torch.stack([loss.float(), norm.float()])
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            # the same decision on every rank: the worst loss and norm anywhere (NaN wins)
            bad = (~torch.isfinite(numbers)).float()
            torch.distributed.all_reduce(bad, op=torch.distributed.ReduceOp.MAX)
            torch.distributed.all_reduce(numbers, op=torch.distributed.ReduceOp.MAX)
            numbers = torch.where(bad > 0, torch.full_like(numbers, math.nan), numbers)
        got = numbers.tolist()
        return got[0], got[1]

    def _verdict(self, loss: float, norm: float) -> str | None:
        if not math.isfinite(loss):
            return f"the loss is {loss}"
        if not math.isfinite(norm):
            return f"the gradient norm is {norm}"
        for what, value, baseline in (
            ("loss", loss, self._losses),
            ("gradient norm", norm, self._norms),
        ):
            if len(baseline) >= self.warmup:
                median, _, z = baseline.score(value)
                if z > self.spike_z and value > self.spike_ratio * median:
                    return (
                        f"the {what} {value:.4g} is a spike ({z:.1f} robust deviations above "
                        f"its median {median:.4g})"
                    )
        return None

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            loss, norm = self._measure()
            self.last = (loss, norm)
            reason = self._verdict(loss, norm)
        except Exception:  # the guard never breaks training: logged, and the step goes on
            log.exception("tensortap guard: could not check step %d", self.step)
            reason = None
            loss = norm = math.nan
        if self.flight_recorder is not None:
            self._remember()
        if reason is None:
            if self._loss is not None:
                self._losses.add(loss)
            self._norms.add(norm)
        else:
            self._trip(reason, loss, norm)
        self.step += 1
        self._loss, self._batch = None, None

    def _trip(self, reason: str, loss: float, norm: float) -> None:
        event = GuardEvent(
            self.step, reason, self._batch, loss if self._loss is not None else None, norm
        )
        self.events.append(event)
        log.warning("tensortap guard at step %d (batch %r): %s", self.step, self._batch, reason)
        if self.flight_recorder is not None:
            self._write_flight_recorder(event)
        if self.action in ("skip", "stop"):
            for p in self.params:
                p.grad = None  # the optimizer then leaves the weights and its state alone
            self.skipped += 1
        if self.action == "stop":
            self.should_stop = True

    # -- the flight recorder --
    def _remember(self) -> None:
        snapshot = _Snapshot(self.step)
        for p in self.params:
            name = self._names.get(id(p))
            if name is None or not self._keep_name(name):
                continue
            snapshot.tensors[name] = p.detach().to("cpu", copy=True)
            if p.grad is not None:
                snapshot.tensors[f"gradient/{name}"] = p.grad.detach().to("cpu", copy=True)
        if self._loss is not None:
            snapshot.tensors["loss"] = self._loss.detach().to("cpu", copy=True).float()
        self._ring.append(snapshot)

    def _write_flight_recorder(self, event: GuardEvent) -> None:
        """Hand the ring buffer (CPU copies, no longer touched here) to the background thread,
        within the budget; a trip over it is only counted."""
        with self._recording:
            if self._started >= self.max_recordings:
                self._over_budget += 1
                if self._over_budget == 1:
                    log.warning(
                        "tensortap guard: %d flight recordings made (max_recordings); later "
                        "trips are counted in guard.status but not recorded",
                        self.max_recordings,
                    )
                return
            self._started += 1
            if self._recorder is None:
                self._recorder = ThreadPoolExecutor(1, "tensortap-guard-recorder")
            ring = list(self._ring)
            rank, ranks = 0, 1  # every rank trips alike: each records its own worker
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                rank, ranks = torch.distributed.get_rank(), torch.distributed.get_world_size()
            self._pending = [f for f in self._pending if not f.done()]
            self._pending.append(self._recorder.submit(self._record, event.step, ring, rank, ranks))

    def _record(self, step: int, ring: list[_Snapshot], rank: int, ranks: int) -> None:
        """On the background thread: the ring buffer as a trial of its own,
        ``<flight_recorder>/trip-<step>``: one step per remembered training step (oldest
        first; the scalar ``training_step`` says which), the last being the one that tripped
        the guard; under ``torch.distributed`` each rank writes its own worker of it."""
        from tensortap.core.save_config import SaveConfig
        from tensortap.hook import Hook

        assert self.flight_recorder is not None
        where = os.path.join(self.flight_recorder, f"trip-{step}")
        try:
            hook = Hook(
                where,
                save_config=SaveConfig(save_interval=1),
                include_regex=".*",
                worker=rank,
                num_workers=ranks,
            )
            for snapshot in ring:
                hook.save_scalar("training_step", float(snapshot.step))
                for name, tensor in snapshot.tensors.items():
                    kind = "gradients" if name.startswith("gradient/") else "weights"
                    hook.save_tensor(
                        name, tensor.numpy(), collections="losses" if name == "loss" else kind
                    )
                hook.next_step()
            status = hook.close()
            if not status.healthy:
                raise RuntimeError(f"its writer reported {status.writer.last_error}")
        except Exception:  # never breaks training: logged and counted
            log.exception("tensortap guard: could not write the flight recorder to %s", where)
            with self._recording:
                self._failed += 1
            return
        with self._recording:
            self.recorded.append(where)
            self._bytes += status.writer.bytes_written


__all__ = ["ACTIONS", "MAX_RECORDINGS", "Guard", "GuardEvent", "GuardStatus"]
