"""Names of pytree leaves, from their paths: ``params/Dense_0/kernel``.

Dict keys, sequence indices and attribute names become path components joined by ``/``; a
trailing ``value`` (the attribute holding a Flax NNX Variable's array) is dropped. Leaves named
``params/...`` are weights (``.../bias``: biases), ``gradient/...`` gradients, ``opt_state/...``
optimizer variables; anything else joins ``default``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from tensortap.core._collections import CollectionKeys
from tensortap.core._roles import JAX_LAYOUT
from tensortap.core._roles import bias_names as core_bias_names

OPTIMIZER_VARIABLES = "optimizer_variables"


class Leaf(NamedTuple):
    """What the host needs of a leaf whose values come from inside a jitted step."""

    name: str
    dtype: Any
    shape: tuple[int, ...]


def key_text(key: Any) -> str:
    """One component of a JAX key path, as text."""
    for attr in ("key", "idx", "name"):  # DictKey, SequenceKey / FlattenedIndexKey, GetAttrKey
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def path_name(prefix: str, path: Iterable[Any]) -> str:
    parts = [key_text(k) for k in path]
    if len(parts) > 1 and parts[-1] == "value":
        parts.pop()
    return "/".join(p for p in (prefix, *parts) if p)


def collections_for(name: str) -> tuple[str, ...]:
    head, _, _ = name.partition("/")
    if head == "gradient":
        return (CollectionKeys.GRADIENTS,)
    if head in ("params", "param", "weights"):
        return (CollectionKeys.BIASES,) if name.endswith("bias") else (CollectionKeys.WEIGHTS,)
    if head in ("opt_state", "optimizer"):
        return (OPTIMIZER_VARIABLES,)
    if head == "update":
        return ("updates",)
    return (CollectionKeys.DEFAULT,)


def bias_names(leaves: Iterable[tuple[str, Any]], *, initial: bool = False) -> set[str]:
    """The names among ``(name, array)`` leaves of a parameter tree that are biases by shape
    and use, whatever their names (Haiku's ``b``, ``linear/b``, a plain ``b0``): a 1-D leaf
    beside a kernel (a leaf of the same parent whose last axis is as long: it is added to that
    kernel's output), or, when ``initial`` (the parameters an optimizer starts from), a 1-D
    leaf of zeros (a bias or an offset). A name ending in ``bias`` is one too. The rule is
    :func:`tensortap.core._roles.bias_names`, with JAX's layout."""
    return core_bias_names(leaves, JAX_LAYOUT, initial=initial)
