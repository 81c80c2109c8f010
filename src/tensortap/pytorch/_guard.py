"""A guard inside the training step: around ``optimizer.step()`` it checks the loss, the
gradients and the update for NaN/Inf and for spikes against a robust window of the last
accepted steps, and undoes a bad update before it can spoil the weights, without a host sync.

::

    guard = tt.Guard(optimizer, model, action="skip", flight_recorder="runs/job1/flight", keep=5)
    for batch_index, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        guard.observe(loss, batch=batch_index)   # optional: the loss and the batch's identity
        optimizer.step()                         # undone when the guard trips
        if guard.should_stop:
            break

Where things happen:

- On the device, inside the step (:mod:`tensortap.pytorch._guard_device`): the gradient norm
  before the update; copies of the parameters and the optimizer state into buffers allocated
  once; after the update, its norm, the scores against the window, six 0/1 reasons, one
  all-reduce (MAX) of them under ``torch.distributed`` so every rank decides alike, and, where
  any is set, parameters and state put back with ``torch.where`` (``undo="snapshot"``). An
  optimizer with its own device-side skip (PyTorch's fused ones, ``undo="optimizer"``, chosen
  by ``"auto"``) is handed the flag as its ``found_inf`` instead, decided before the step on the
  loss and gradient norm: nothing is copied. Nothing there reads a value on the host: no
  ``.item()``, no ``.tolist()``, no ``if tensor``.
- Then the step's row of statistics is copied to the host without blocking (an event marks
  when it has arrived, on CUDA) and handed to the guard's reader thread
  (``tensortap-guard-reader``), which turns it into :class:`GuardEvent`, :attr:`events`,
  :attr:`status`, the skip budget, :attr:`on_trip` and flight recordings.
- Reading :attr:`events`, :attr:`skipped`, :attr:`should_stop`, :attr:`last` or :attr:`status`
  waits for the reader to have read every decision that has arrived, never for the device: on
  the CPU they are up to date after each step; on CUDA a decision is visible once the device
  has finished its step (usually one step later). :meth:`flush` waits for all of them.

Actions when it trips: ``"skip"`` (default) undoes the update (weights and optimizer state as
they were); ``"stop"`` does that and sets :attr:`should_stop`; ``"record"`` only records.
A :class:`SkipBudget` (``budget=SkipBudget(skips=3, steps=100, then="stop")``) stops training,
or asks a :class:`~tensortap.core._rollback_target.RollbackTarget` to roll back, after too many
skips.

The flight recorder (``flight_recorder``) keeps, every step, the statistics of the last
``history`` steps and each step's batch identity; the raw parameters and gradients of the last
``keep`` steps only within ``flight_budget_bytes``. A trip writes the last ``keep`` steps as a
trial, ``create_trial(f"{flight_recorder}/trip-{step}")``, at most ``max_recordings`` (3) of
them, on a background thread. See docs/pytorch.md, "A guard inside the step".

The pieces: the options (:mod:`~tensortap.pytorch._guard_options`), the work on the device
(:mod:`~tensortap.pytorch._guard_device`), the reader thread
(:mod:`~tensortap.pytorch._guard_reader`), the skip budget
(:mod:`~tensortap.healing._budget`) and the flight recorder's copies
(:mod:`~tensortap.pytorch._guard_flight`); here, the :class:`Guard` that joins them.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from tensortap.core._rollback_target import RollbackTarget
from tensortap.exceptions import InvalidConfigError
from tensortap.healing._budget import BUDGET_ACTIONS, MicroBatches, SkipBudget, SkipWindow
from tensortap.hook._open import current_hook
from tensortap.pytorch import _guard_device as cols
from tensortap.pytorch._guard_device import SIGNALS, DeviceDecision
from tensortap.pytorch._guard_flight import FlightRing, FlightStep, write_recording
from tensortap.pytorch._guard_options import ACTIONS, GuardOptions
from tensortap.pytorch._guard_reader import Decision, DecisionReader

log = logging.getLogger(__name__)

MAX_RECORDINGS = 3  # the flight recorder's default budget per guard
FLIGHT_BUDGET_BYTES = 64 * 2**20  # the flight recorder's raw copies, at most
HISTORY = 128  # steps of statistics kept


@dataclass(frozen=True)
class GuardStatus:
    """What the guard did so far (``Guard.status``)."""

    trips: int  #: how many times it tripped
    skipped_updates: int  #: updates it undid ("skip" and "stop"), counted from the device flags
    recordings: int  #: flight recordings written (each a trial under ``flight_recorder``)
    recordings_pending: int  #: handed to the background thread, not written yet
    recordings_over_budget: int  #: trips not recorded because ``max_recordings`` were made
    recordings_failed: int  #: recordings that could not be written (logged)
    recording_bytes: int  #: bytes of values the written recordings hold
    decisions: int = 0  #: steps whose decision the reader has read
    decisions_pending: int = 0  #: steps decided on the device, not read yet
    skips_in_budget_window: int = 0  #: skips within the budget's last ``steps`` steps
    budget_exhausted: int = 0  #: how many times the skip budget ran out
    rollbacks_requested: int = 0  #: of those, rollbacks asked for
    snapshot_bytes: int = 0  #: device memory of the copies of parameters and optimizer state
    flight_bytes: int = 0  #: host memory of the flight recorder's raw copies
    undo: str = ""  #: how updates are undone: "snapshot", "optimizer" or "none"
    late_observes: int = 0  #: observes seen after optimizer.step() (warned once)


@dataclass(frozen=True)
class GuardEvent:
    """One trip of the guard.

    ``rng_state`` is the random number generators' state when the previous optimizer step
    ended (the CPU generator under ``"cpu"``, each initialised CUDA device's under ``"cuda"``),
    that is before this step's forward pass: with ``batch`` it is what a replay of the step
    needs."""

    step: int
    reason: str
    batch: Any = None
    loss: float | None = None
    grad_norm: float | None = None
    update_norm: float | None = None
    skipped: bool = False  #: whether the update was undone
    rng_state: dict[str, Any] | None = None


@dataclass(frozen=True)
class GuardRecord:
    """One step's statistics as the reader read them (``Guard.history()``)."""

    step: int
    batch: Any
    loss: float | None
    grad_norm: float
    update_norm: float | None
    tripped: bool
    skipped: bool
    rng_state: dict[str, Any] | None = None


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _scalar(name: str, value: Any, what: str) -> torch.Tensor | float:
    """``value`` checked for :meth:`Guard.observe`: a tensor of one element (detached, left
    on its device) or a real number."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.is_complex():
            raise InvalidConfigError(
                f"Guard.observe {name} must be a tensor of one real number ({what}), got a "
                f"tensor of shape {tuple(value.shape)} and dtype {value.dtype}; reduce it first "
                "(loss.mean())"
            )
        return value.detach()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidConfigError(
            f"Guard.observe {name} must be a tensor or a real number ({what}), got "
            f"{type(value).__name__} {value!r}; pass {name}= the tensor itself"
        )
    return float(value)


def _worst(a: torch.Tensor | float, b: torch.Tensor | float) -> torch.Tensor | float:
    """The larger of two micro-batch losses, NaN when either is NaN (torch.maximum, on the
    device: no host read)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        like = a if isinstance(a, torch.Tensor) else b
        assert isinstance(like, torch.Tensor)
        a, b = (
            (v.reshape(-1)[0].float().to(like.device, non_blocking=True))
            if isinstance(v, torch.Tensor)
            else torch.full((), v, device=like.device)
            for v in (a, b)
        )
        return torch.maximum(a, b)
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


def _all_reduce_max(bits: torch.Tensor) -> None:
    torch.distributed.all_reduce(bits, op=torch.distributed.ReduceOp.MAX)


def _reduce() -> Callable[[torch.Tensor], None] | None:
    """How the ranks agree: one all-reduce (MAX) under torch.distributed, else nothing."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return _all_reduce_max
    return None


#: The kind of a guard's trip in a session's events (``trial.sessions()[i].events``).
TRIP_EVENT = "guard_trip"


def _keep_in_session(decision: Decision, event: GuardEvent) -> None:
    """The trip as an event of the session of the hook that was open when its step ran, at
    that step's global step (the dashboard marks it there): on the reader thread, a step or
    more later; a hook closed since keeps nothing."""
    hook = decision.hook
    if hook is None or getattr(hook, "closed", False):
        return
    try:
        hook.record_event(
            TRIP_EVENT,
            {
                "step": event.step,
                "at": decision.global_step,
                "reason": event.reason,
                "skipped": bool(event.skipped),
            },
        )
    except Exception:
        log.exception("tensortap guard: could not keep the trip of step %d", event.step)


class Guard:
    """See the module docstring. ``spike_z``: how many robust standard deviations above the
    median of the last ``window`` accepted steps a signal must be to be a spike, and at least
    ``spike_ratio`` times that median; no spike is judged while the window holds fewer than
    ``warmup`` finite values (non-finite values always trip). ``signals``: which of ``"loss"``,
    ``"grad_norm"``, ``"update_norm"`` are judged for spikes. ``on_trip`` is called with each
    :class:`GuardEvent` on the reader thread."""

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
        *,
        signals: Sequence[str] = SIGNALS,
        budget: SkipBudget | None = None,
        rollback: RollbackTarget | None = None,
        on_trip: Callable[[GuardEvent], None] | None = None,
        history: int = HISTORY,
        flight_budget_bytes: int = FLIGHT_BUDGET_BYTES,
        compile: bool = False,
        undo: str = "auto",
    ) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise InvalidConfigError(
                f"Guard needs the torch.optim.Optimizer whose step it guards, got {optimizer!r}"
            )
        if model is not None and not isinstance(model, torch.nn.Module):
            raise InvalidConfigError(
                "Guard's model must be the torch.nn.Module being trained (it names the "
                f"parameters in events and flight recordings) or None, got "
                f"{type(model).__name__} {model!r}: Guard(optimizer, model)"
            )
        options = GuardOptions(
            action=action,
            spike_z=spike_z,
            spike_ratio=spike_ratio,
            window=window,
            warmup=warmup,
            keep=keep,
            names=names,
            max_recordings=max_recordings,
            signals=signals,
            budget=budget,
            rollback=rollback,
            on_trip=on_trip,
            history=history,
            flight_budget_bytes=flight_budget_bytes,
            undo=undo,
        )
        if flight_recorder is not None and model is None:
            raise InvalidConfigError("Guard's flight_recorder needs the model (its parameters)")
        self.undo = options.undo_for(optimizer)
        self.optimizer, self.action = optimizer, action
        self.spike_z, self.spike_ratio, self.warmup = spike_z, spike_ratio, warmup
        self.budget, self.rollback, self.on_trip = budget, rollback, on_trip
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        self._names = {id(p): n for n, p in model.named_parameters()} if model is not None else {}
        keep_name = options.name_filter()
        self.flight_recorder = None if flight_recorder is None else os.fspath(flight_recorder)
        self.keep = keep
        self._flight = (
            FlightRing(self._names, keep_name, keep, flight_budget_bytes)
            if self.flight_recorder is not None
            else None
        )
        self._device = DeviceDecision(
            window=window,
            warmup=warmup,
            spike_z=spike_z,
            spike_ratio=spike_ratio,
            judged=tuple(signals),
            undo=self.undo,
            measure_update="update_norm" in signals,
            history=history,
            compiled=bool(compile),
        )
        self._host_rows: torch.Tensor | None = None  # pinned copies of the ring (CUDA)
        self._loss: Any = None  # the step's worst micro-batch loss so far
        self._batches: list[Any] = []  # each observe's batch, this step
        self._grad_norm: Any = None  # the loop's gradient norm (observe(grad_norm=)), this step
        # the first parameter's gradient at the last observe: another one (zero_grad ran) and
        # no optimizer.step() between means a new step
        self._grad_seen: weakref.ref[torch.Tensor] | None = None
        # observe() after optimizer.step(): a step ran with nothing observed, then an observe
        # came, and no step was ever observed in time (warned once, counted in status)
        self._step_ended_unobserved = False
        self._observed_in_time = False
        self._late_observes = 0
        self._armed = False  # the pre-step half ran; the post-step half is due
        self._rng = _rng_state()
        self.step = 0
        self.max_recordings = max_recordings
        self.recorded: list[str] = []  # the flight recorder's trials, in the order written
        # what the reader thread moves, guarded by one lock
        self._lock = threading.Lock()
        self._events: list[GuardEvent] = []
        self._history: deque[GuardRecord] = deque(maxlen=max(history, keep))
        self._skipped = 0
        self._should_stop = False
        self._last: tuple[float, float] | None = None
        self._skips = SkipWindow(budget)
        self._reader = DecisionReader(self._take)
        self._recorder: ThreadPoolExecutor | None = None  # made at the first recording
        self._pending: list[Future[None]] = []
        self._started = self._over_budget = self._failed = self._bytes = 0
        self._handles = [
            optimizer.register_step_pre_hook(self._before_step),
            optimizer.register_step_post_hook(self._after_step),
        ]

    def observe(
        self,
        loss: torch.Tensor | float,
        batch: Any = None,
        *,
        step: int | None = None,
        grad_norm: torch.Tensor | float | None = None,
    ) -> None:
        """The step's loss (judged with the gradients) and whatever names its batch, before
        ``optimizer.step()``; ``step`` numbers this step as the loop does when that is not the
        guard's count of optimizer steps (after a rollback the loop counts from the restored
        checkpoint again, and the guard's events, its rollback requests and a replayer's
        captures must agree).

        With gradient accumulation, call it once per micro-batch: the step is judged on its
        worst (largest; NaN wins) micro-batch loss, and its event's ``batch`` is the tuple of
        every micro-batch's id (a :class:`~tensortap.healing._budget.MicroBatches`; a
        rollback is asked to skip each). ``grad_norm``: the total gradient norm before
        clipping, as ``torch.nn.utils.clip_grad_norm_`` returns it (a tensor, left on its
        device): judged for this step instead of the guard's own norm, which after a clip is
        at most ``max_norm``."""
        if step is not None:
            if isinstance(step, bool) or not isinstance(step, int) or step < 0:
                raise InvalidConfigError(
                    f"Guard.observe(step=...) takes the loop's step number, an int >= 0, got "
                    f"{step!r}; leave it out to number steps by the optimizer's count"
                )
            self.step = step
        value = _scalar("loss", loss, "the step's loss: the tensor loss_fn returned")
        grad = self.params[0].grad if self.params else None
        seen = self._grad_seen
        if self._loss is not None and seen is not None and seen() is not grad:
            # the gradients were reset since the last observe, and no optimizer.step() came
            # (a GradScaler skipped it): what was observed belongs to a step that never ran
            self._loss, self._batches, self._grad_norm = None, [], None
        self._grad_seen = weakref.ref(grad) if grad is not None else None
        if grad_norm is not None:
            self._grad_norm = _scalar(
                "grad_norm", grad_norm, "the total norm torch.nn.utils.clip_grad_norm_ returns"
            )
        if self._step_ended_unobserved and not self._observed_in_time:
            self._late_observes += 1
            if self._late_observes == 1:
                log.warning(
                    "tensortap guard: observe() came after optimizer.step() (step %d ran with "
                    "nothing observed): call guard.observe(loss) before optimizer.step(), or "
                    "each step is judged on the previous step's loss",
                    self.step - 1,
                )
        self._step_ended_unobserved = False
        self._loss = value if self._loss is None else _worst(self._loss, value)
        if batch is not None:  # an observe without a batch (the grad_norm's) names none
            self._batches.append(batch)

    # -- what the reader has read (see the module docstring) --
    @property
    def events(self) -> list[GuardEvent]:
        """Every trip read so far, oldest first."""
        self._settle()
        return self._events

    @property
    def skipped(self) -> int:
        """Updates undone so far."""
        self._settle()
        return self._skipped

    @property
    def should_stop(self) -> bool:
        """Whether training should stop (action "stop", or a stopping skip budget ran out)."""
        self._settle()
        return self._should_stop

    @should_stop.setter
    def should_stop(self, value: bool) -> None:
        with self._lock:
            self._should_stop = bool(value)

    @property
    def last(self) -> tuple[float, float] | None:
        """The last read step's (loss, gradient norm); the loss is 0.0 when not observed."""
        self._settle()
        return self._last

    def history(self) -> list[GuardRecord]:
        """The statistics of the last ``history`` steps read, oldest first."""
        self._settle()
        with self._lock:
            return list(self._history)

    @property
    def status(self) -> GuardStatus:
        """Trips, skipped updates, the budget, and the flight recorder's recordings so far."""
        self._settle()
        read, unread = self._reader.counts()
        with self._lock:
            pending = sum(not f.done() for f in self._pending)
            window = len(self._skips.skips)
            return GuardStatus(
                trips=len(self._events),
                skipped_updates=self._skipped,
                recordings=len(self.recorded),
                recordings_pending=pending,
                recordings_over_budget=self._over_budget,
                recordings_failed=self._failed,
                recording_bytes=self._bytes,
                decisions=read,
                decisions_pending=unread,
                skips_in_budget_window=window,
                budget_exhausted=self._skips.exhausted,
                rollbacks_requested=self._skips.rollbacks,
                snapshot_bytes=self._device.copy_bytes,
                flight_bytes=self._flight.nbytes if self._flight is not None else 0,
                undo=self.undo,
                late_observes=self._late_observes,
            )

    def settle(self, timeout: float = 60.0) -> None:
        """Wait until every decision that has arrived on the host is read, its ``on_trip``
        called and its rollback requested; never waits for the device (a decision still being
        computed is left to a later call). On the CPU every decision has arrived once its
        step ends. A replayer that follows the guard calls it before each step."""
        self._settle(timeout)

    def _settle(self, timeout: float = 60.0) -> None:
        """Wait until the reader has read every decision that has arrived on the host."""
        self._reader.settle(timeout)

    def remove(self, timeout: float | None = 60.0) -> bool:
        """Stop guarding (the optimizer's hooks are removed) and wait up to ``timeout`` seconds
        for the decisions and flight recordings still pending (see :meth:`flush`)."""
        for handle in self._handles:
            handle.remove()
        done = self.flush(timeout)
        self._reader.close()
        if self._recorder is not None:
            self._recorder.shutdown(wait=False)  # what is still running finishes on its own
            self._recorder = None
        return done

    def flush(self, timeout: float | None = 60.0) -> bool:
        """Wait up to ``timeout`` seconds (None: for ever) for every decision to be read and the
        flight recordings to be written (or to fail, see :attr:`status`); whether all were."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        if not self._reader.wait_all(left()):
            return False
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            try:
                future.result(left())
            except TimeoutError:
                return False
        return True

    # -- inside optimizer.step(), on the training thread: no host reads --
    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._armed = False
        try:
            with torch.no_grad():
                grad_norm = self._grad_norm
                if grad_norm is not None and not isinstance(grad_norm, torch.Tensor):
                    grad_norm = torch.tensor(float(grad_norm))
                self._device.before(self.optimizer, self.params, self._loss, _reduce(), grad_norm)
                if self._flight is not None:
                    self._flight.remember(self.step, self.params)
            self._armed = True
        except Exception:  # the guard never breaks training: logged, and the step goes on
            log.exception("tensortap guard: could not check step %d", self.step)
            self._finish_step()

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self._armed:
            return
        self._armed = False
        try:
            slot = self.step % self._device.history
            with torch.no_grad():
                row = self._device.after(self.optimizer, _reduce(), slot)
                row, event = self._to_host(row, slot)
            batches = self._batches
            batch = MicroBatches(batches) if len(batches) > 1 else batches[0] if batches else None
            hook = current_hook("pytorch")
            at = getattr(hook, "step", None)
            self._reader.submit(
                Decision(
                    self.step,
                    row,
                    event,
                    batch,
                    self._loss is not None,
                    self._rng,
                    hook,
                    at if isinstance(at, int) else None,
                )
            )
        except Exception:
            log.exception("tensortap guard: could not decide step %d", self.step)
        self._finish_step()

    def _finish_step(self) -> None:
        self._rng = _rng_state()  # the next step's, before its forward pass
        self.step += 1
        if self._loss is None:
            self._step_ended_unobserved = True
        else:
            self._observed_in_time = not self._late_observes
        self._loss, self._batches, self._grad_norm = None, [], None

    def _to_host(self, row: torch.Tensor, slot: int) -> tuple[torch.Tensor, Any]:
        """The row on the host: itself on the CPU; from CUDA a copy into pinned memory that
        arrives later (the event says when)."""
        if not row.is_cuda:
            return row, None  # its slot is rewritten only ``history`` steps later
        if self._host_rows is None:
            self._host_rows = torch.empty(self._device.ring.shape, pin_memory=True)
        host = self._host_rows[slot]
        host.copy_(row, non_blocking=True)
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        event.record(torch.cuda.current_stream(row.device))
        return host, event

    # -- on the reader thread --
    def _take(self, decision: Decision) -> None:
        values = decision.row.tolist()
        step, batch = decision.step, decision.batch
        loss = values[cols.LOSS] if decision.observed else None
        update_norm = values[cols.UPDATE_NORM] if self._device.copy_params else None
        bits = values[cols.BITS : cols.BITS + 6]
        tripped, skipped = max(bits) > 0, values[cols.SKIPPED] > 0
        record = GuardRecord(
            step,
            batch,
            loss,
            values[cols.GRAD_NORM],
            update_norm,
            tripped,
            skipped,
            decision.rng_state,
        )
        event = None
        if tripped:
            reason = self._reason(values, bits)
            event = GuardEvent(
                step,
                reason,
                batch,
                loss,
                values[cols.GRAD_NORM],
                update_norm,
                skipped,
                decision.rng_state,
            )
            log.warning("tensortap guard at step %d (batch %r): %s", step, batch, reason)
        with self._lock:
            self._history.append(record)
            self._last = (loss if loss is not None else 0.0, values[cols.GRAD_NORM])
            if event is not None:
                self._events.append(event)
                self._skipped += skipped
                if self.action == "stop":
                    self._should_stop = True
            if skipped:
                self._skips.skipped(step, batch)
        if event is not None:
            _keep_in_session(decision, event)
            if self._flight is not None:
                self._write_flight_recorder(event)
            if self.on_trip is not None:
                try:
                    self.on_trip(event)
                except Exception:
                    log.exception("tensortap guard: on_trip failed at step %d", step)
        if self.budget is not None:
            self._spend(step, event)

    def _reason(self, values: list[float], bits: list[float]) -> str:
        names = ("loss", "gradient norm", "update norm")
        firsts = (cols.LOSS, cols.GRAD_NORM, cols.UPDATE_NORM)
        for i, (name, column) in enumerate(zip(names, firsts, strict=True)):
            if bits[i] > 0:
                value = values[column]
                if math.isfinite(value):
                    return f"the {name} is not finite on another rank"
                return f"the {name} is {value}"
        for i, (name, column) in enumerate(zip(names, firsts, strict=True)):
            if bits[3 + i] > 0:
                value, median, z = values[column], values[cols.MEDIAN + i], values[cols.Z + i]
                if not (math.isfinite(z) and z > self.spike_z):
                    return f"the {name} is a spike on another rank"
                return (
                    f"the {name} {value:.4g} is a spike ({z:.1f} robust deviations above "
                    f"its median {median:.4g})"
                )
        return "tripped"  # not reached: some bit is set

    def _spend(self, step: int, event: GuardEvent | None) -> None:
        """The skip budget: too many skips within its window stop or roll back."""
        with self._lock:
            exhausted = self._skips.spend(step, None if event is None else event.reason)
            if exhausted is not None and exhausted.then == "stop":
                self._should_stop = True
        if exhausted is None:
            return
        log.warning("tensortap guard: skip budget exhausted at step %d: %s", step, exhausted.reason)
        if exhausted.then == "rollback":
            assert self.rollback is not None
            try:
                self.rollback.request(exhausted.first_step, exhausted.batches, exhausted.reason)
            except Exception:
                log.exception("tensortap guard: the rollback request failed at step %d", step)

    # -- the flight recorder --
    def _write_flight_recorder(self, event: GuardEvent) -> None:
        """Hand the last ``keep`` steps to the background writer, within the budget; a trip
        over it is only counted."""
        assert self._flight is not None
        with self._lock:
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
            records = [r for r in self._history if r.step > event.step - self.keep]
        steps = []
        for r in records:
            scalars = {"grad_norm": r.grad_norm}
            if r.loss is not None:
                scalars["loss"] = r.loss
            if r.update_norm is not None:
                scalars["update_norm"] = r.update_norm
            steps.append(FlightStep(r.step, scalars, self._flight.take(r.step, event.step)))
        rank, ranks = 0, 1  # every rank trips alike: each records its own worker
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            rank, ranks = torch.distributed.get_rank(), torch.distributed.get_world_size()
        with self._lock:
            if self._recorder is None:
                self._recorder = ThreadPoolExecutor(1, "tensortap-guard-recorder")
            self._pending = [f for f in self._pending if not f.done()]
            self._pending.append(
                self._recorder.submit(self._record, event.step, steps, rank, ranks)
            )

    def _record(self, step: int, steps: list[FlightStep], rank: int, ranks: int) -> None:
        """On the recorder thread: the steps as ``<flight_recorder>/trip-<step>``."""
        assert self.flight_recorder is not None
        where = os.path.join(self.flight_recorder, f"trip-{step}")
        try:
            written = write_recording(where, steps, rank, ranks)
        except Exception:  # never breaks training: logged and counted
            log.exception("tensortap guard: could not write the flight recorder to %s", where)
            with self._lock:
                self._failed += 1
            return
        with self._lock:
            self.recorded.append(where)
            self._bytes += written


__all__ = [
    "ACTIONS",
    "BUDGET_ACTIONS",
    "FLIGHT_BUDGET_BYTES",
    "HISTORY",
    "MAX_RECORDINGS",
    "Guard",
    "GuardEvent",
    "GuardRecord",
    "GuardStatus",
    "RollbackTarget",
    "SkipBudget",
]
