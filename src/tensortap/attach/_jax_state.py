"""Zero code change for JAX without a host callback in the step: what each step shows is kept
in the optimizer state, on the device, and read on the host only at saving steps.

The outermost watched Optax transformation's ``init`` returns a :class:`Tapped` state: the
optimizer's own state (``inner``; attributes and items are read through, so
``opt_state.hyperparams`` and ``opt_state[0]`` still work) beside a :class:`TapState`:

- the steps taken (the first update of a fresh tap takes the optimizer's own ``count`` when
  its state keeps one, so a script restored from a checkpoint saved without tensortap is
  numbered all the same; a tap restored with the state keeps its own);
- the vital signs (loss, grad_norm, update_norm, lr) of the last :data:`RING` steps;
- the gradients and the parameters after the update of the last step that the ``gradients``,
  ``weights`` or ``biases`` schedule made due (a ``lax.cond`` in the step; one float32 copy
  of each, on the device).

The host sees each new state when a compiled step returns it (JAX rebuilds the output tree:
:func:`_unflatten_tap` runs, with no wait on the device) and counts steps; when the count
reaches a saving step, or half the ring, it reads the state back (one transfer, waiting for
that step) and saves every step since the last read under its own step number. At exit the
last state seen is read. The cost per step is a few small device operations and one Python
call; see docs/jax.md.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

import numpy as np

from tensortap.exceptions import TrainingStopped

logger = logging.getLogger(__name__)

#: Steps of vital signs the state keeps; the host reads it at least every half of it.
RING = 256
#: The vital signs in a ring row, in order (``core._vitals`` names).
ROW = ("loss", "grad_norm", "update_norm", "lr")


class Tapped:
    """An optimizer's state (``inner``) with tensortap's (``tap``) beside it; reads through to
    the optimizer's state."""

    __slots__ = ("inner", "tap")

    def __init__(self, inner: Any, tap: Any) -> None:
        self.inner = inner
        self.tap = tap

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "tap"):  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __getitem__(self, key: Any) -> Any:
        return self.inner[key]

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Any:
        return iter(self.inner)

    def __repr__(self) -> str:
        return f"Tapped({self.inner!r})"


class TapState:
    """tensortap's part of a :class:`Tapped` state: two float32 arrays (each array a step
    returns costs a little on every call, so there are few).

    - ``ring`` (``RING + 1``, 4): row ``step % RING`` holds that step's vital signs (:data:`ROW`);
      the last row, the steps taken and the step whose arrays ``kept`` holds (plus one; 0:
      none), each as two exact float halves (``high * 65536 + low``);
    - ``kept``: the gradients then the parameters after the update of that step, raveled.
    """

    __slots__ = ("kept", "ring")

    def __init__(self, ring: Any, kept: Any) -> None:
        self.ring = ring
        self.kept = kept


def _register() -> None:
    import jax

    def flatten_tapped(x: Tapped) -> tuple[tuple[Any, ...], None]:
        return (
            (jax.tree_util.GetAttrKey("inner"), x.inner),
            (jax.tree_util.GetAttrKey("tap"), x.tap),
        ), None

    jax.tree_util.register_pytree_with_keys(
        Tapped, flatten_tapped, lambda _, c: Tapped(*c), lambda x: ((x.inner, x.tap), None)
    )

    def flatten_tap(x: TapState) -> tuple[tuple[Any, ...], None]:
        keys = ("ring", "kept")
        return tuple((jax.tree_util.GetAttrKey(k), getattr(x, k)) for k in keys), None

    jax.tree_util.register_pytree_with_keys(
        TapState, flatten_tap, _unflatten_tap, lambda x: ((x.ring, x.kept), None)
    )


def register_flax(serialization: Any) -> None:
    """Flax's checkpoints (``TrainState``) serialise a :class:`Tapped` state as its parts."""

    def to_dict(x: Tapped) -> dict[str, Any]:
        tap = x.tap
        return {
            "inner": serialization.to_state_dict(x.inner),
            "tap": {k: serialization.to_state_dict(getattr(tap, k)) for k in TapState.__slots__},
        }

    def from_dict(target: Tapped, state: dict[str, Any]) -> Tapped:
        tap = target.tap
        parts = {
            k: serialization.from_state_dict(getattr(tap, k), state["tap"][k])
            for k in TapState.__slots__
        }
        inner = serialization.from_state_dict(target.inner, state["inner"])
        return Tapped(inner, TapState(**parts))

    try:
        serialization.register_serialization_state(Tapped, to_dict, from_dict)
    except Exception:  # registered already
        logger.debug("tensortap: Tapped is registered with flax.serialization", exc_info=True)


def _unflatten_tap(_: None, children: Any) -> TapState:
    tap = TapState(*children)
    try:
        reader.seen(tap)
    except TrainingStopped:
        raise  # a job's stop request, met at a saved step: it ends the script
    except Exception:
        logger.exception("tensortap could not read a JAX step's state; training continues")
    return tap


# -- in the step --
_HALF = 65536


def init_tap(params: Any) -> TapState:
    """The tap of a fresh optimizer state for ``params``."""
    import jax
    import jax.numpy as jnp

    size = sum(int(np.size(x)) for x in jax.tree_util.tree_leaves(params))
    ring = jnp.full((RING + 1, len(ROW)), jnp.nan, jnp.float32)
    ring = ring.at[RING].set(jnp.zeros(len(ROW), jnp.float32))
    return TapState(ring, jnp.zeros(2 * size, jnp.float32))


def _split(n: Any) -> Any:
    import jax.numpy as jnp

    return jnp.stack([n // _HALF, n % _HALF]).astype(jnp.float32)


def _join(halves: Any) -> Any:
    import jax.numpy as jnp

    return halves[0].astype(jnp.int32) * _HALF + halves[1].astype(jnp.int32)


def tap_steps(tap: TapState, count: Any) -> Any:
    """In the step: the number of the update about to be taken (the tap's count; for a fresh
    tap, the optimizer's own ``count``, -1 if it keeps none)."""
    import jax.numpy as jnp

    steps = _join(tap.ring[RING, :2])
    return jnp.where(steps == 0, jnp.maximum(count, 0), steps)


def tap_update(tap: TapState, step: Any, row: Any, grads: Any, weights: Any, due: Any) -> TapState:
    """In the step: the tap after update ``step`` (see :func:`tap_steps`; ``row``: its vital
    signs; ``grads`` and the ``weights`` after it kept when ``due``)."""
    import jax
    import jax.numpy as jnp

    ring = tap.ring.at[step % RING].set(row)

    def take(_: Any) -> tuple[Any, Any]:
        leaves = jax.tree_util.tree_leaves(grads) + jax.tree_util.tree_leaves(weights)
        flat = jnp.concatenate([jnp.ravel(x).astype(jnp.float32) for x in leaves])
        return flat, step + 1

    def keep(_: Any) -> tuple[Any, Any]:
        return tap.kept, _join(tap.ring[RING, 2:])

    if isinstance(due, (bool, np.bool_)) or concrete(due):
        # an eager step (no jit around it): a cond of these new closures would be traced and
        # compiled again at every step (a 300-step eager loop ran 6x slower)
        kept, saved = take(None) if bool(due) else keep(None)
    else:
        kept, saved = jax.lax.cond(due, take, keep, None)
    ring = ring.at[RING].set(jnp.concatenate([_split(step + 1), _split(saved)]))
    return TapState(ring, kept)


# -- on the host --
class _Reader:
    """Counts the steps whose state the host saw and reads the state back when due."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.latest: TapState | None = None
        self.predicted: int | None = None  # the steps taken, as counted on the host
        self.per_state = 1  # steps per state seen (more when a compiled call loops over steps)
        self.states = 0  # states seen since the last read
        self.read_at = 0  # read back when the count reaches it
        self.done: int | None = None  # steps before this one are saved
        self.read_time = 0.0
        self.arrays_due = True  # the next read holds a step that saves arrays (see read)
        self.sink: Any = None  # the attachment's host side (see attach._jax)
        self.lost_warned = False
        # the hook's work runs on a thread of its own, off the training loop's
        self.work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.worker: threading.Thread | None = None
        self.stop: TrainingStopped | None = None  # met by the worker, raised at the next state

    def seen(self, tap: TapState) -> None:
        """A state came out of a step (or was made): count it; read it back when due. This
        runs on the training loop's thread at every step, so its common path is short."""
        steps = tap.ring
        if self.sink is None or (type(steps) not in _CONCRETE and not concrete(steps)):
            return
        stop, self.stop = self.stop, None
        if stop is not None:
            raise stop
        with self.lock:
            if self.latest is not None and self.latest.ring is steps:
                return  # the same state again (a tree_map that keeps it, device_get)
            self.latest = tap
            if not self.sink.updated:  # the init's state, or one the script restored
                import jax

                self.done = self.predicted = _header(jax.device_get(steps))[0]
                self.read_at, self.arrays_due = self.predicted + 1, True
                self.read_time = time.perf_counter()
                return
            self.states += 1
            if self.predicted is not None:
                self.predicted += self.per_state
                if self.predicted < self.read_at:
                    return
            self.read()

    def read(self) -> None:
        """Read the latest state back and save the steps it holds that are not saved yet."""
        import jax

        tap = self.latest
        if tap is None:
            return
        # one transfer: the ring, and the arrays when a step due to save them is among those
        # read (next_read says so; a read it did not foresee fetches them after)
        if self.arrays_due:
            ring, kept_read = jax.device_get((tap.ring, tap.kept))
        else:
            ring, kept_read = jax.device_get(tap.ring), None
        steps, saved_step = _header(ring)
        now = time.perf_counter()
        if steps == 0:  # a state the steps pass through unwatched (see attach._jax)
            self.done = self.predicted = 0
            self.read_at = RING // 2
            return
        # the steps after those saved (all the ring holds when no state was seen before)
        start = min(steps, max(steps - RING, 0) if self.done is None else self.done)
        if steps - start > RING:
            if not self.lost_warned:
                self.lost_warned = True
                logger.warning(
                    "tensortap: %d JAX steps ran between two reads of the optimizer state, "
                    "more than the %d it keeps: the vital signs of steps %d-%d are lost",
                    steps - start,
                    RING,
                    start,
                    steps - RING - 1,
                )
            start = steps - RING
        per_step = None
        if self.done is not None and steps > start:
            per_step = (now - self.read_time) / (steps - start)
        kept = None
        if start <= saved_step < steps:
            kept = kept_read
            if kept is None:
                kept = jax.device_get(tap.kept)
        rows = [(step, ring[step % RING].tolist()) for step in range(start, steps)]
        self._submit((rows, per_step, saved_step, kept))
        if self.done is not None and self.states:
            self.per_state = max(1, round((steps - self.done) / self.states))
        self.states = 0
        self.done = steps
        self.read_time = now
        self.predicted = steps
        self.read_at, self.arrays_due = self.sink.next_read(steps, RING // 2)

    def _submit(self, item: Any) -> None:
        if self.worker is None:
            self.worker = threading.Thread(target=self._work, name="tensortap-jax", daemon=True)
            self.worker.start()
        self.work.put(item)

    def _work(self) -> None:
        """The worker: save what each read found, in order."""
        while True:
            item = self.work.get()
            if isinstance(item, threading.Event):
                item.set()
                continue
            rows, per_step, saved_step, kept = item
            try:
                step_time = float("nan") if per_step is None else per_step
                self.sink.steps(rows, step_time, saved_step, kept)
            except TrainingStopped as stop:
                self.stop = stop  # the training loop raises it at its next step
            except Exception:
                logger.exception("tensortap could not save JAX steps; training continues")

    def flush(self, timeout: float = 120.0) -> None:
        """At exit: save the steps the last state holds, and wait for the worker (at most
        ``timeout`` seconds: a stuck save never holds the process)."""
        with self.lock:
            try:
                if self.latest is not None and self.sink is not None:
                    self.read()
            except Exception:
                logger.exception("tensortap could not read the last JAX steps")
            if self.worker is not None:
                done = threading.Event()
                self.work.put(done)
                if not done.wait(timeout):
                    logger.warning("tensortap: the last JAX steps were not saved in %ss", timeout)


def _header(ring: Any) -> tuple[int, int]:
    """The steps taken and the step ``kept`` holds (-1: none), from a ring read back."""
    halves = np.asarray(ring[RING]).astype(np.int64)
    return int(halves[0] * _HALF + halves[1]), int(halves[2] * _HALF + halves[3]) - 1


#: The types of the JAX arrays with values seen (a type is one or never: a tracer's is not):
#: asking ``isinstance(x, jax.Array)`` costs about 2 us, too much for every step.
_CONCRETE: set[type] = set()


def concrete(x: Any) -> bool:
    """Whether ``x`` is a JAX array with values (not a tracer)."""
    if type(x) in _CONCRETE:
        return True
    import jax

    if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
        _CONCRETE.add(type(x))
        return True
    return False


reader = _Reader()
_register()
