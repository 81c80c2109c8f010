"""A guard for Optax: a ``GradientTransformation`` around the optimizer that judges each step's
loss, gradient norm and update norm against a robust window held in the optimizer state, and
skips a bad update inside ``jit``, on the device, with no host read.

::

    guard = tensortap.jax.Guard(optax.adam(1e-3), budget=SkipBudget(skips=3, steps=100))
    opt_state = guard.init(params)

    @jax.jit
    def train_step(params, opt_state, batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        updates, opt_state = guard.update(grads, opt_state, params, value=loss)
        return optax.apply_updates(params, updates), opt_state

    for batch in batches:
        params, opt_state = train_step(params, opt_state, batch)
        guard.read(opt_state)            # on the host, as often as you like
        if guard.should_stop:
            break

Like ``optax.apply_if_finite``, but judged as the PyTorch guard judges
(:func:`tensortap.healing.score`: non-finite values, and spikes over the median/MAD of the last
``window`` accepted steps). A tripped step returns zero updates (``-0.0``, which added to any
parameter changes no bit, ``-0.0`` included) and leaves the inner optimizer's state as it was
(``jnp.where`` on every leaf), so the parameters and the state after it are bit-equal to those
before it; the
tripped step enters neither the inner state nor the window. The guard's own state holds the
window, the counts, and a ring of the last ``history`` trips, which :meth:`Guard.read` turns
into :class:`~tensortap.healing.GuardEvent` on the host and spends the skip budget with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from tensortap.exceptions import InvalidConfigError
from tensortap.healing._budget import SkipBudget
from tensortap.healing._events import GuardEvent, GuardLog, GuardStatus
from tensortap.healing._options import GuardSettings
from tensortap.healing._window import SIGNALS, SKIPPED, WIDTH, accept, score

STEP, LOSS_GIVEN = WIDTH, WIDTH + 1  # the trip ring's two extra columns


class GuardState(NamedTuple):
    """The guard's part of the optimizer state (arrays only: it goes through ``jit``)."""

    inner: Any  #: the guarded optimizer's state
    window: jax.Array  #: (3, window) float32, NaN where empty
    head: jax.Array  #: where the next kept step enters the window
    steps: jax.Array  #: steps decided
    trips: jax.Array  #: steps that tripped
    skipped: jax.Array  #: updates undone
    trip_rows: jax.Array  #: (history, WIDTH + 2): each trip's row, its step, whether a loss came


class Guard:
    """A guard around ``inner`` (an Optax ``GradientTransformation``); see the module
    docstring. ``action``, ``spike_z``, ``spike_ratio``, ``window``, ``warmup``, ``signals``,
    ``budget`` and ``rollback`` as in :class:`tensortap.healing.GuardSettings` (the PyTorch
    ``Guard``'s); ``history``: how many trips the state keeps between two :meth:`read`\\ s."""

    def __init__(
        self,
        inner: optax.GradientTransformation,
        action: str = "skip",
        spike_z: float = 6.0,
        spike_ratio: float = 2.0,
        window: int = 50,
        warmup: int = 10,
        *,
        signals: Sequence[str] = SIGNALS,
        budget: SkipBudget | None = None,
        rollback: Any = None,
        history: int = 64,
    ) -> None:
        if not (
            callable(getattr(inner, "init", None)) and callable(getattr(inner, "update", None))
        ):
            raise InvalidConfigError(
                "tensortap.jax.Guard needs the Optax GradientTransformation it guards "
                f"(Guard(optax.adam(1e-3))), got {type(inner).__name__} {inner!r}"
            )
        if isinstance(history, bool) or not isinstance(history, int) or history < 1:
            raise InvalidConfigError(
                f"Guard history must be an int >= 1 (trips kept between reads), got {history!r}"
            )
        self.settings = GuardSettings(
            action, spike_z, spike_ratio, window, warmup, tuple(signals), budget, rollback
        )
        self.inner = optax.with_extra_args_support(inner)
        self.history = history
        self._log = GuardLog(self.settings)
        self._read = 0  # trips read so far
        self.tx = optax.GradientTransformationExtraArgs(self.init, self.update)

    # -- inside jit --
    def init(self, params: Any) -> GuardState:
        """The inner optimizer's state, an empty window and no trips."""
        return GuardState(
            inner=self.inner.init(params),
            window=jnp.full((len(SIGNALS), self.settings.window), jnp.nan, jnp.float32),
            head=jnp.zeros((), jnp.int32),
            steps=jnp.zeros((), jnp.int32),
            trips=jnp.zeros((), jnp.int32),
            skipped=jnp.zeros((), jnp.int32),
            trip_rows=jnp.full((self.history, WIDTH + 2), jnp.nan, jnp.float32),
        )

    def update(
        self,
        updates: Any,
        state: GuardState,
        params: Any = None,
        *,
        value: Any = None,
        **extra_args: Any,
    ) -> tuple[Any, GuardState]:
        """The inner optimizer's updates, or zeros where the guard trips (the inner state then
        kept as it was). ``value``: the step's loss (optional; without it the loss is not
        judged)."""
        if not isinstance(state, GuardState):
            raise InvalidConfigError(
                "Guard.update needs the state Guard.init made (a GuardState), got "
                f"{type(state).__name__}: initialise with guard.init(params)"
            )
        if value is not None:
            extra_args["value"] = value
        new_updates, new_inner = self.inner.update(updates, state.inner, params, **extra_args)
        settings = self.settings
        loss = jnp.nan if value is None else jnp.asarray(value, jnp.float32).reshape(-1)[0]
        values = jnp.stack(
            [
                jnp.asarray(loss, jnp.float32),
                optax.tree.norm(updates).astype(jnp.float32),
                optax.tree.norm(new_updates).astype(jnp.float32),
            ]
        )
        # an update of exactly zero is no update (a micro-step of optax.MultiSteps): its norm
        # is neither judged nor let into the window, where zeros would make every real one a spike
        present = jnp.stack([jnp.asarray(value is not None), jnp.asarray(True), values[2] != 0])
        judged = jnp.array([s in settings.signals for s in SIGNALS])
        median, z, bits, fresh = score(
            jnp,
            state.window,
            values,
            present,
            judged,
            warmup=settings.warmup,
            spike_z=settings.spike_z,
            spike_ratio=settings.spike_ratio,
        )
        tripped = jnp.any(bits > 0)
        undo = tripped & settings.undoes
        # -0.0, not 0.0: p + -0.0 is p for every p, -0.0 included (-0.0 + 0.0 is +0.0)
        out = jax.tree_util.tree_map(
            lambda u: jnp.where(undo, jnp.full_like(u, -0.0), u), new_updates
        )
        inner = jax.tree_util.tree_map(
            lambda new, old: jnp.where(undo, old, new), new_inner, state.inner
        )
        window, head = accept(jnp, state.window, state.head, fresh, ~tripped)
        row = jnp.concatenate(
            [
                values,
                median,
                z,
                bits,
                undo.astype(jnp.float32)[None],
                state.steps.astype(jnp.float32)[None],
                present[:1].astype(jnp.float32),
            ]
        )
        at = (jnp.arange(self.history) == state.trips % self.history)[:, None] & tripped
        return out, GuardState(
            inner=inner,
            window=window,
            head=head,
            steps=state.steps + 1,
            trips=state.trips + tripped.astype(jnp.int32),
            skipped=state.skipped + undo.astype(jnp.int32),
            trip_rows=jnp.where(at, row[None, :], state.trip_rows),
        )

    # -- on the host --
    def read(self, opt_state: Any) -> list[GuardEvent]:
        """Read the trips in ``opt_state`` (the whole optimizer state, or the guard's part)
        that were not read yet; returns their events and spends the skip budget. Reads a few
        numbers from the device: call it every step, or every few (at most ``history`` trips
        apart, or the older ones are only counted, in ``status.lost``)."""
        state = opt_state if isinstance(opt_state, GuardState) else _find(opt_state)
        steps, trips = (int(n) for n in jax.device_get((state.steps, state.trips)))
        if trips < self._read:  # the state went back (a rollback restored an older one)
            self._read = trips
        self._log.steps = steps
        new: list[GuardEvent] = []
        if trips <= self._read:
            return new  # nothing tripped since the last read: two numbers read, no rows
        rows = np.asarray(jax.device_get(state.trip_rows), dtype=np.float64)
        first = max(self._read, trips - self.history)
        self._log.lost += first - self._read
        for index in range(first, trips):
            row = rows[index % self.history]
            present = (bool(row[LOSS_GIVEN]), True, True)
            event = self._log.take(int(row[STEP]), row[:WIDTH], present=present)
            if event is not None:
                new.append(event)
        self._read = trips
        self._log.steps = steps
        return new

    @property
    def events(self) -> list[GuardEvent]:
        """Every trip read so far (:meth:`read`)."""
        return list(self._log.events)

    @property
    def skipped(self) -> int:
        """Updates undone, as read."""
        return self._log.skipped

    @property
    def should_stop(self) -> bool:
        """Whether training should stop (action ``"stop"`` tripped, or the skip budget with
        ``then="stop"`` ran out), as read."""
        return self._log.should_stop

    @property
    def status(self) -> GuardStatus:
        """What the guard did, as read."""
        return self._log.status


def _find(opt_state: Any) -> GuardState:
    """The one :class:`GuardState` in ``opt_state``."""
    found = [
        leaf
        for leaf in jax.tree_util.tree_leaves(
            opt_state, is_leaf=lambda x: isinstance(x, GuardState)
        )
        if isinstance(leaf, GuardState)
    ]
    if len(found) != 1:
        raise InvalidConfigError(
            f"Guard.read needs an optimizer state holding one guard's state, found {len(found)} "
            "in what it got: pass the state that guard.init / guard.update returned"
        )
    return found[0]


__all__ = ["SKIPPED", "Guard", "GuardState"]
