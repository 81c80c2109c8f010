"""``create_trial`` on a trial written by smdebug: it is converted once into a tensortap copy in
a cache directory (``$TENSORTAP_CACHE``, default ``~/.cache/tensortap/smdebug``), keyed by its
location and the list of its index files, so that a trial that grew is converted again; the
Trial API then reads the copy. Nothing is written where the smdebug trial lives."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tensortap.smdebug.convert import convert
from tensortap.smdebug.reader import INDEX, is_smdebug_trial
from tensortap.storage import Store, open_store

_MARKER = "tensortap.json"  # a tensortap trial's marker: such a trial is never converted


def cache_dir() -> Path:
    root = os.environ.get("TENSORTAP_CACHE") or os.path.join(Path.home(), ".cache", "tensortap")
    return Path(root) / "smdebug"


def tensortap_copy_if_smdebug(location: str | os.PathLike[str] | Store) -> Any:
    """``location`` itself, or the path of a tensortap copy when it holds an smdebug trial."""
    try:
        store = open_store(location)
        if store.exists(_MARKER) or not is_smdebug_trial(store):
            return location
    except Exception:  # not ours to judge here: the Trial reports what is wrong with it
        return location
    keys = store.list(INDEX)
    digest = hashlib.sha256("\n".join([str(store.location), *keys]).encode()).hexdigest()[:16]
    target = cache_dir() / digest
    if (target / _MARKER).exists():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{digest}-", dir=target.parent))
    try:
        convert(store, partial)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    try:
        partial.rename(target)
    except OSError:  # another process converted it first
        shutil.rmtree(partial, ignore_errors=True)
    return str(target)
