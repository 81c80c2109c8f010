"""What the JAX hook's taps need from it: :class:`JaxTapHost`.

The taps are the Optax transformations of :func:`tensortap.jax.record` (``_record.py``, and
``_carried.py`` for ``via="state"``) and the zero-code attachment (``attach/_jax.py``): code
that runs inside or beside a jitted step and hands the hook what the step computed. They hold
the hook as a ``JaxTapHost``: every hook's :class:`~tensortap.core._tap_host.TapHost`, plus
the hook's public surface they use and the steps of a jitted loop (delivery, the optimizer's
count, the weights before the first update). :class:`~tensortap.jax._hook.Hook` implements
it; the taps never import it. The members not in the user guide are internal: public by name
so that the taps may use them, not for users.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from tensortap.core._modes import ModeKeys
from tensortap.core._reduction_config import ReductionConfig
from tensortap.core._save_config import SaveConfig
from tensortap.core._tap_host import TapHost
from tensortap.jax._names import Leaf


class Carried(NamedTuple):
    """What the host knows of one carried recording (the hook keeps a list, indexed by tag)."""

    collection: str
    leaves: tuple[Leaf, ...]
    specs: tuple[tuple[str, bool], ...]


class JaxTapHost(TapHost, Protocol):
    """The part of a :class:`tensortap.jax.Hook` its taps use (see the module docstring)."""

    # -- the hook's public surface (see the user guide) --
    def set_mode(self, mode: ModeKeys | str | int) -> None: ...
    def next_step(self) -> None: ...
    def is_collection_due(self, name: str) -> bool: ...
    def is_collection_included(self, name: str) -> bool: ...
    def save_config_of(self, name: str) -> SaveConfig: ...
    def reduction_config_of(self, name: str) -> ReductionConfig: ...
    def save_vitals(self, values: Mapping[str, Any]) -> int: ...
    def save_scalar(
        self, name: str, value: Any, collections: str | Iterable[str] | None = None
    ) -> bool: ...

    # -- the steps of a jitted loop (internal) --
    def deliver(
        self,
        count: int,
        meta: Sequence[Leaf],
        specs: tuple[tuple[str, bool], ...],
        stats: Any = None,
        leaves: Any = None,
    ) -> None:
        """Values computed inside a jitted step for optimizer step ``count``: for each leaf of
        ``meta``, its statistics ``specs`` (one row of ``stats``) or its raw value (in
        ``leaves``). The current step becomes TRAIN step ``count``."""
        ...

    def carry(self, carried: Carried) -> int:
        """Register a carried recording (at the optimizer's ``init``); its tag."""
        ...

    def advance_to(self, count: int) -> None:
        """Make the current step TRAIN step ``count`` (closing the steps before it)."""
        ...

    def follow_count(self, count: int) -> None:
        """The first optimizer step of this session is TRAIN step ``count``."""
        ...

    @property
    def resumes_trial(self) -> bool:
        """Whether this session writes on after earlier sessions' steps in the trial."""
        ...

    def save_items(self, items: Sequence[tuple[str, Any, tuple[str, ...]]]) -> int:
        """Save each ``(name, array, collections)`` that is due; how many were."""
        ...

    # -- the weights before the first update (initial_weights) --
    def note_initial(self, params: Any) -> None:
        """Keep the weights an optimizer was initialised with, until the first step that
        saves weights, which saves them as ``initial/<name>``."""
        ...

    @property
    def holds_initial(self) -> bool:
        """Whether weights from an optimizer's init are kept, waiting to be saved."""
        ...

    @property
    def initial_done(self) -> bool:
        """Whether the weights before the first update were saved (or never will be)."""
        ...

    def save_initial(self, items: Sequence[tuple[str, Any]]) -> None:
        """Save ``(name, array)`` weights as those before the first update, once."""
        ...
