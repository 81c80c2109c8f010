"""Zero code change for JAX without a host callback in the step: what each step shows is kept
in the optimizer state, on the device, and read on the host only at saving steps.

The outermost watched Optax transformation's ``init`` returns a :class:`Tapped` state: the
optimizer's own state (``inner``; attributes and items are read through, so
``opt_state.hyperparams`` and ``opt_state[0]`` still work) beside a :class:`TapState`:

- ``steps``: the optimizer steps taken (the first update of a fresh tap takes the optimizer's
  own ``count`` when its state keeps one, so a script restored from a checkpoint saved without
  tensortap is numbered all the same);
- ``ring``: the vital signs (loss, grad_norm, update_norm, lr) of the last :data:`RING` steps,
  row ``step % RING``;
- ``saved_step``, ``grads``, ``weights``: the gradients and the parameters after the update of
  the last step that the ``gradients``, ``weights`` or ``biases`` schedule made due (a
  ``lax.cond`` in the step; one copy of each, on the device).

The host sees each new state when a compiled step returns it (JAX rebuilds the output tree:
:func:`_unflatten_tap` runs, with no wait on the device) and counts steps; when the count
reaches a saving step, or half the ring, it reads the state back (one transfer, waiting for
that step) and saves every step since the last read under its own step number. At exit the
last state seen is read. The cost per step is a few small device operations and one Python
call; see docs/jax.md.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

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
    """tensortap's part of a :class:`Tapped` state (see the module docstring)."""

    __slots__ = ("grads", "ring", "saved_step", "steps", "weights")

    def __init__(self, steps: Any, ring: Any, saved_step: Any, grads: Any, weights: Any) -> None:
        self.steps = steps
        self.ring = ring
        self.saved_step = saved_step
        self.grads = grads
        self.weights = weights

    def children(self) -> tuple[Any, ...]:
        return (self.steps, self.ring, self.saved_step, self.grads, self.weights)


def _register() -> None:
    import jax

    def flatten_tapped(x: Tapped) -> tuple[tuple[Any, ...], None]:
        return ((jax.tree_util.GetAttrKey("inner"), x.inner), (jax.tree_util.GetAttrKey("tap"), x.tap)), None

    jax.tree_util.register_pytree_with_keys(
        Tapped, flatten_tapped, lambda _, c: Tapped(*c), lambda x: ((x.inner, x.tap), None)
    )

    def flatten_tap(x: TapState) -> tuple[tuple[Any, ...], None]:
        keys = ("steps", "ring", "saved_step", "grads", "weights")
        return tuple((jax.tree_util.GetAttrKey(k), getattr(x, k)) for k in keys), None

    jax.tree_util.register_pytree_with_keys(
        TapState, flatten_tap, _unflatten_tap, lambda x: (x.children(), None)
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
def init_tap(params: Any) -> TapState:
    """The tap of a fresh optimizer state for ``params``."""
    import jax
    import jax.numpy as jnp

    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return TapState(
        jnp.zeros([], jnp.int32),
        jnp.full((RING, len(ROW)), jnp.nan, jnp.float32),
        jnp.asarray(-1, jnp.int32),
        zeros,
        zeros,
    )


def tap_update(
    tap: TapState,
    count: Any,
    row: Any,
    grads: Any,
    weights: Any,
    due: Any,
) -> TapState:
    """In the step: the tap after an update (``count``: the optimizer's own count before it,
    -1 if none; ``row``: its vital signs; ``grads`` and the ``weights`` after it, kept when
    ``due``)."""
    import jax
    import jax.numpy as jnp

    steps = jnp.where(tap.steps == 0, jnp.maximum(count, 0), tap.steps)
    ring = tap.ring.at[steps % RING].set(row)

    def take(_: Any) -> tuple[Any, Any, Any]:
        cast = jax.tree_util.tree_map
        return (
            cast(lambda a, b: jnp.asarray(b).astype(a.dtype), tap.grads, grads),
            cast(lambda a, b: jnp.asarray(b).astype(a.dtype), tap.weights, weights),
            steps,
        )

    def keep(_: Any) -> tuple[Any, Any, Any]:
        return tap.grads, tap.weights, tap.saved_step

    kept_grads, kept_weights, saved = jax.lax.cond(due, take, keep, None)
    return TapState(steps + 1, ring, saved, kept_grads, kept_weights)


# -- on the host --
class _Reader:
    """Counts the steps whose state the host saw and reads the state back when due."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.latest: TapState | None = None
        self.predicted: int | None = None  # the steps taken, as counted on the host
        self.read_at = 0  # read back when the count reaches it
        self.done: int | None = None  # steps before this one are saved
        self.read_time = 0.0
        self.sink: Any = None  # the attachment's host side (see attach._jax)
        self.lost_warned = False

    def seen(self, tap: TapState) -> None:
        import jax

        steps = tap.steps
        if self.sink is None or not _concrete(steps):
            return
        with self.lock:
            if self.latest is not None and self.latest.steps is steps:
                return  # the same state again (a tree_map that keeps it, device_get)
            self.latest = tap
            if not self.sink.updated:  # the init's state, or one the script restored
                self.done = self.predicted = int(jax.device_get(steps))
                self.read_at = self.predicted + 1
                return
            if self.predicted is not None:
                self.predicted += 1
                if self.predicted < self.read_at:
                    return
            self.read()

    def read(self) -> None:
        """Read the latest state back and save the steps it holds that are not saved yet."""
        import jax

        tap = self.latest
        if tap is None:
            return
        steps, ring, saved_step = jax.device_get((tap.steps, tap.ring, tap.saved_step))
        steps, saved_step = int(steps), int(saved_step)
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
            kept = jax.device_get((tap.grads, tap.weights))
        for step in range(start, steps):
            row = dict(zip(ROW, (float(v) for v in ring[step % RING]), strict=True))
            row["step_time"] = per_step if per_step is not None else float("nan")
            self.sink.step(step, row)
            if kept is not None and step == saved_step:
                self.sink.arrays(step, *kept)
        self.done = steps
        self.read_time = now
        self.predicted = steps
        self.read_at = self.sink.next_read(steps, RING // 2)

    def flush(self) -> None:
        """At exit: save the steps the last state holds."""
        with self.lock:
            try:
                if self.latest is not None and self.sink is not None:
                    self.read()
            except Exception:
                logger.exception("tensortap could not read the last JAX steps")


def _concrete(x: Any) -> bool:
    import jax

    return isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer)


reader = _Reader()
_register()
