"""A store that counts the requests made to it: what a reader costs on object storage, measured
on local disk (tests and benchmarks)."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from tensortap.storage import Store, open_store

#: The read requests counted; a batch call (``get_many``, ``get_ranges``) counts one per item.
READS = ("get", "get_range", "get_many", "get_ranges", "list", "list_dir", "size")


def counting_store(location: str | os.PathLike[str]) -> tuple[Store, Counter[str]]:
    """The store at ``location``, and a Counter of the read requests made through it."""
    store = open_store(os.fspath(location))
    counts: Counter[str] = Counter()
    for name in READS:
        original = getattr(store, name)

        def counted(*args: Any, _name: str = name, _fn: Any = original, **kw: Any) -> Any:
            counts[_name] += len(args[0]) if _name in ("get_many", "get_ranges") else 1
            return _fn(*args, **kw)

        setattr(store, name, counted)
    return store, counts
