"""``create_trial`` on a trial written by smdebug: it is converted once into a tensortap copy in
a cache directory (``$TENSORTAP_CACHE``, default ``~/.cache/tensortap/smdebug``) and the Trial
API then reads the copy. Nothing is written where the smdebug trial lives.

- **Keyed on content:** the key is the trial's location and the version of every index, event
  and collections file and of the end marker (size, modification time and inode locally; size
  and ETag on S3; see ``Store.version``), so a re-run into the same place, a re-pointed symlink
  or a trial that grew is converted again, never served from an old copy.
- **Atomic:** a conversion is written under a temporary name and renamed into place only when
  it finished and every step was written; a conversion that fails part-way (a full disk) raises
  and leaves nothing that looks finished.
- **Evicted:** after each conversion, copies unused for ``$TENSORTAP_CACHE_MAX_AGE_DAYS``
  (default 30) are removed, then the least recently used ones until the cache holds at most
  ``$TENSORTAP_CACHE_MAX_BYTES`` (default 10 GiB); the copy just opened is kept.
- **Read-only cache:** when the cache directory cannot be written, the copy goes to a temporary
  directory (removed when the process exits), and failing that to memory.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from tensortap.exceptions import StorageError
from tensortap.smdebug._convert import convert
from tensortap.smdebug._reader import END_MARKER, INDEX, is_smdebug_trial
from tensortap.storage import Store, open_store
from tensortap.storage._memory import MemoryStore

logger = logging.getLogger("tensortap")

_MARKER = "tensortap.json"  # a tensortap trial's marker: such a trial is never converted
#: Defaults of the cache's eviction (each overridden by its environment variable).
MAX_BYTES = 10 << 30
MAX_AGE_DAYS = 30.0
_PARTIAL_AGE = 24 * 3600.0  # a temporary conversion older than this was abandoned


def cache_dir() -> Path:
    root = os.environ.get("TENSORTAP_CACHE") or os.path.join(Path.home(), ".cache", "tensortap")
    return Path(root) / "smdebug"


def content_key(store: Store) -> str:
    """The cache key of the smdebug trial in ``store``: its location and the version of each of
    its files (what changes when any file's content does)."""
    digest = hashlib.sha256(str(store.location).encode())
    for prefix in (INDEX, "events/", "collections/"):
        for key in store.list(prefix):
            try:
                version = store.version(key)
            except KeyError:  # removed while listed: the conversion will say what is missing
                version = "missing"
            digest.update(f"\n{key}\0{version}".encode())
    try:
        digest.update(f"\n{END_MARKER}\0{store.version(END_MARKER)}".encode())
    except KeyError:
        pass
    return digest.hexdigest()[:32]


def tensortap_copy_if_smdebug(
    location: str | os.PathLike[str] | Store, strict: bool = False
) -> Any:
    """``location`` itself, or the location (a path, or a Store) of a tensortap copy when it
    holds an smdebug trial."""
    try:
        store = open_store(location)
        if store.exists(_MARKER) or not is_smdebug_trial(store):
            return location
    except Exception:  # not ours to judge here: the Trial reports what is wrong with it
        return location
    digest = content_key(store) + ("-strict" if strict else "")  # strict: none with problems
    root = cache_dir()
    target = root / digest
    if (target / _MARKER).is_file():
        _touch(target)
        return str(target)
    try:
        root.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f".{digest}-", dir=root))
    except OSError as exc:
        logger.warning(
            "tensortap: the smdebug cache %s cannot be written (%s); converting %s into a "
            "temporary copy for this process only",
            root,
            exc,
            store.location,
        )
        return _convert_elsewhere(store, strict)
    try:
        convert(store, partial, strict=strict)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    try:
        partial.rename(target)
    except OSError:  # another process converted it first
        shutil.rmtree(partial, ignore_errors=True)
    try:
        evict(root, keep=target)
    except OSError as exc:  # never fatal to opening
        logger.warning("tensortap: could not evict old smdebug copies from %s: %s", root, exc)
    return str(target)


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:  # a read-only cache still serves its copies
        pass


def _convert_elsewhere(store: Store, strict: bool) -> Any:
    """A copy in a temporary directory (removed at exit), or in memory when none is writable."""
    try:
        place = Path(tempfile.mkdtemp(prefix="tensortap-smdebug-"))
    except OSError:
        memory = MemoryStore(f"smdebug-{id(store)}")
        convert(store, memory, strict=strict)
        return memory
    atexit.register(shutil.rmtree, place, True)
    try:
        convert(store, place / "trial", strict=strict)
    except StorageError:  # the temporary directory is not writable either (or is full)
        shutil.rmtree(place, ignore_errors=True)
        memory = MemoryStore(f"smdebug-{id(store)}")
        convert(store, memory, strict=strict)
        return memory
    return str(place / "trial")


def _size(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        logger.warning(
            "tensortap: %s=%r is not a number; %s is used", name, os.environ[name], default
        )
        return default


def evict(root: Path, keep: Path | None = None) -> list[Path]:
    """Remove copies unused for ``$TENSORTAP_CACHE_MAX_AGE_DAYS`` days, then the least recently
    used until the cache holds at most ``$TENSORTAP_CACHE_MAX_BYTES``; ``keep`` stays. Abandoned
    temporary conversions older than a day go too. Returns what was removed."""
    max_bytes = _env_float("TENSORTAP_CACHE_MAX_BYTES", MAX_BYTES)
    max_age = _env_float("TENSORTAP_CACHE_MAX_AGE_DAYS", MAX_AGE_DAYS) * 86400.0
    now = time.time()
    removed: list[Path] = []
    entries: list[tuple[float, int, Path]] = []
    for path in root.iterdir():
        if path == keep or not path.is_dir() or path.is_symlink():
            continue
        used = path.stat().st_mtime
        if path.name.startswith("."):
            if now - used > _PARTIAL_AGE:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
            continue
        if now - used > max_age:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
            continue
        entries.append((used, _size(path), path))
    total = sum(size for _, size, _ in entries) + (_size(keep) if keep else 0)
    for _, size, path in sorted(entries):  # least recently used first
        if total <= max_bytes:
            break
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
        total -= size
    return removed
