"""What the Keras hook's taps need from it: :class:`KerasTapHost`.

The taps (``_activations.py``, ``_gradients.py``, ``_vitals.py``, ``_vital_steps.py``,
``_outcome.py``) hold the hook as a ``KerasTapHost``: every hook's
:class:`~tensortap.core._tap_host.TapHost`, plus the model it is a callback of and the names
Keras objects are saved under.
:class:`~tensortap.keras._hook.KerasHook` implements it; the taps never import it.
"""

from __future__ import annotations

from typing import Any, Protocol

from tensortap.core._tap_host import TapHost


class KerasTapHost(TapHost, Protocol):
    """The part of a :class:`~tensortap.keras._hook.KerasHook` its taps use."""

    @property
    def model(self) -> Any:
        """The Keras model the hook is a callback of (None before ``fit`` sets it)."""
        ...

    def layer_name(self, layer: Any) -> str:
        """The name of ``layer``'s tensors: its Keras path without the model's name."""
        ...

    def variable_name(self, variable: Any) -> str:
        """The name ``variable`` is saved under: its Keras path without the model's name."""
        ...
