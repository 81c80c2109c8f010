"""One byte budget over many caches: least recently used out across all of them."""

from __future__ import annotations

import numpy as np
import pytest

from tensortap.core._memory_budget import MemoryBudget, nbytes
from tensortap.exceptions import InvalidConfigError


def test_caches_on_one_budget_evict_the_least_recently_used_of_all() -> None:
    budget = MemoryBudget(1000)
    a, b = budget.cache(), budget.cache()
    a.put("x", 1, 400)
    b.put("y", 2, 400)
    assert a.get("x") == 1  # x used after y: y is the oldest now
    b.put("z", 3, 400)  # 1,200 > 1,000: y, the oldest of both caches, leaves
    assert b.get("y") is None and a.get("x") == 1 and b.get("z") == 3
    assert budget.size == 800 and a.size == 400 and b.size == 400 and budget.evicted == 1
    a.put("w", 4, 500)  # x is the oldest now (z was read after it)
    assert a.get("x") is None and budget.size == 900 and budget.peak <= 1000
    a.put("huge", 5, 2000)  # larger than the whole budget: not kept, nothing dropped for it
    assert a.get("huge") is None and len(a) == 1 and len(b) == 1
    a.put("w", 6, 100)  # put again: weighed again
    assert budget.size == 500 and a.get("w") == 6
    a.clear()
    assert budget.size == 400 and len(a) == 0 and b.get("z") == 3


def test_nbytes_counts_arrays_exactly() -> None:
    x = np.zeros(1000, np.float64)
    assert nbytes(x) == 8000 + 112 and nbytes(x, x[:10]) == 8000 + 80 + 224


@pytest.mark.parametrize("bad", [-1, 1.5, True, "10"])
def test_a_budget_is_a_number_of_bytes(bad) -> None:
    with pytest.raises(InvalidConfigError, match="number of bytes"):
        MemoryBudget(bad)
