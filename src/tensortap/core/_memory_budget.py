"""One byte budget shared by many caches: what a long-lived reader (the dashboard) keeps in
memory, least recently used out across all of them.

A :class:`MemoryBudget` accounts the bytes of every entry of every :class:`BudgetCache` made
on it; putting an entry that would take the total over the budget first drops the entries
used longest ago, whichever cache holds them. Each entry is weighed once, when it is put, by
its caller: NumPy arrays exactly (:func:`nbytes`), other objects by a conservative estimate.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Generic, TypeVar

import numpy as np

from tensortap.exceptions import InvalidConfigError

V = TypeVar("V")


class MemoryBudget:
    """At most ``limit`` bytes kept by the caches made with :meth:`cache` (all of them
    together), the least recently used dropped first. ``size`` is what they hold now, ``peak``
    the most they ever held (never above ``limit``)."""

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise InvalidConfigError(f"a memory budget is a number of bytes >= 0, got {limit!r}")
        self.limit = limit
        self.size = 0
        self.peak = 0
        self.evicted = 0  # entries dropped to stay under the limit
        self._order: OrderedDict[tuple[int, Any], tuple[BudgetCache[Any], int]] = OrderedDict()
        self._lock = threading.RLock()

    def cache(self) -> BudgetCache[Any]:
        """A new cache whose entries count against this budget."""
        return BudgetCache(self)

    def _touch(self, cache: BudgetCache[Any], key: Any) -> None:
        self._order.move_to_end((id(cache), key))

    def _add(self, cache: BudgetCache[Any], key: Any, size: int) -> bool:
        """Account an entry, dropping the oldest entries first; False when it is larger than
        the whole budget (not kept)."""
        if size > self.limit:
            return False
        while self.size + size > self.limit and self._order:
            (_, old_key), (owner, old_size) = self._order.popitem(last=False)
            owner._forget(old_key)
            self.size -= old_size
            self.evicted += 1
        self._order[(id(cache), key)] = (cache, size)
        self.size += size
        self.peak = max(self.peak, self.size)
        return True

    def _remove(self, cache: BudgetCache[Any], key: Any) -> None:
        found = self._order.pop((id(cache), key), None)
        if found is not None:
            self.size -= found[1]


class BudgetCache(Generic[V]):
    """A thread-safe mapping whose entries count against a :class:`MemoryBudget` (each weighed
    by its caller when put); an entry may be dropped whenever another is put, in this cache or
    another on the same budget: :meth:`get` then answers None and the caller reads it again."""

    def __init__(self, budget: MemoryBudget) -> None:
        self.budget = budget
        self._items: dict[Any, V] = {}
        self._sizes: dict[Any, int] = {}

    @property
    def size(self) -> int:
        """The bytes this cache's entries are accounted at."""
        with self.budget._lock:
            return sum(self._sizes.values())

    def get(self, key: Any) -> V | None:
        with self.budget._lock:
            if key not in self._items:
                return None
            self.budget._touch(self, key)
            return self._items[key]

    def put(self, key: Any, value: V, size: int) -> None:
        """Keep ``value`` as ``size`` bytes (not kept when larger than the whole budget)."""
        with self.budget._lock:
            self.pop(key)
            if self.budget._add(self, key, size):
                self._items[key] = value
                self._sizes[key] = size

    def pop(self, key: Any) -> V | None:
        with self.budget._lock:
            self.budget._remove(self, key)
            self._sizes.pop(key, None)
            return self._items.pop(key, None)

    def clear(self) -> None:
        with self.budget._lock:
            for key in list(self._items):
                self.pop(key)

    def _forget(self, key: Any) -> None:  # the budget's eviction (its lock held)
        self._items.pop(key, None)
        self._sizes.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items


def nbytes(*arrays: np.ndarray) -> int:
    """The bytes of NumPy arrays' buffers, exactly, plus their headers (~112 bytes each)."""
    return sum(int(a.nbytes) + 112 for a in arrays)


#: A conservative cost of one Python object held in a list or dict (a float, an int, a small
#: tuple: its object and the slot pointing at it).
PY_OBJECT_BYTES = 64


__all__ = ["PY_OBJECT_BYTES", "BudgetCache", "MemoryBudget", "nbytes"]
