"""Plugins installed as distributions: the entry points of a group, loaded when asked for.

A package makes a store or a rule known to every process (the command line, a job's rule
processes, the dashboard) by declaring an entry point, as zarr's codecs do::

    [project.entry-points."tensortap.stores"]
    sqlite = "tt_sqlite"                  # a module that calls register_store("sqlite", ...)

    [project.entry-points."tensortap.rules"]
    LossAbove = "my_rules:LossAbove"      # a Rule subclass (or a module registering some)

Nothing is imported until a name nobody registered is asked for (an unknown URL scheme, an
unknown rule name); then the group's entry points are loaded, each once per process. One that
fails to load is remembered with its distribution and what failed, and never keeps the others
from loading.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

logger = logging.getLogger(__name__)

#: The entry-point group of store backends: the name is the URL scheme.
STORES_GROUP = "tensortap.stores"
#: The entry-point group of rules: the name is the rule's class name (or any name, for a module).
RULES_GROUP = "tensortap.rules"


@dataclass(frozen=True)
class PluginFailure:
    """An entry point that could not be loaded (or whose object was not what its group takes)."""

    group: str
    name: str
    value: str
    distribution: str
    error: str

    def describe(self) -> str:
        """One sentence for an error message: which, from where, what failed, what to do."""
        return (
            f"the entry point {self.name} = {self.value!r} (group {self.group}) of the "
            f"distribution {self.distribution} failed: {self.error}; fix or uninstall "
            f"{self.distribution}"
        )


@dataclass(frozen=True)
class LoadedPlugin:
    """An entry point that loaded, with what it named."""

    name: str
    value: str
    distribution: str
    loaded: object


_KEY = tuple[str, str, str, str]
_loaded: dict[_KEY, LoadedPlugin] = {}
_failed: dict[_KEY, PluginFailure] = {}
_listed: dict[tuple[str, tuple[str, ...]], list[metadata.EntryPoint]] = {}
_lock = threading.RLock()


def _distribution(entry: metadata.EntryPoint) -> str:
    dist = getattr(entry, "dist", None)
    if dist is None:
        return "(unknown distribution)"
    return f"{dist.name} {dist.version}"


def entry_points(group: str) -> list[metadata.EntryPoint]:
    """The group's entry points installed (read from the dist-info on ``sys.path``; read again
    only when ``sys.path`` changed: a listing reads every distribution's metadata)."""
    key = (group, tuple(sys.path))
    with _lock:
        listed = _listed.get(key)
    if listed is not None:
        return listed
    try:
        listed = list(metadata.entry_points(group=group))
    except Exception as exc:  # a broken installation: said, and no plugin found
        logger.warning("tensortap: could not list the entry points of %s: %s", group, exc)
        listed = []
    with _lock:
        _listed[key] = listed
    return listed


def plugin_names(group: str) -> list[str]:
    """The names the group's installed entry points declare, sorted (nothing is imported)."""
    return sorted({entry.name for entry in entry_points(group)})


def load_plugins(
    group: str,
    wanted: Callable[[str], bool] | None = None,
    accept: Callable[[LoadedPlugin], None] | None = None,
) -> tuple[list[LoadedPlugin], list[PluginFailure]]:
    """Load the group's entry points (those whose name ``wanted`` accepts), each once per
    process; ``accept`` is called on each newly loaded one (registering it) and may raise to
    refuse it. What loaded, and what failed (now or before), in the order installed."""
    loaded: list[LoadedPlugin] = []
    failed: list[PluginFailure] = []
    with _lock:
        for entry in entry_points(group):
            if wanted is not None and not wanted(entry.name):
                continue
            key = (group, entry.name, entry.value, _distribution(entry))
            if key in _loaded:
                loaded.append(_loaded[key])
                continue
            if key in _failed:
                failed.append(_failed[key])
                continue
            try:
                plugin = LoadedPlugin(entry.name, entry.value, key[3], entry.load())
                if accept is not None:
                    accept(plugin)
            except Exception as exc:  # a broken plugin never hides the others
                failure = PluginFailure(group, *key[1:], f"{type(exc).__name__}: {exc}")
                logger.warning("tensortap: %s", failure.describe())
                _failed[key] = failure
                failed.append(failure)
                continue
            _loaded[key] = plugin
            loaded.append(plugin)
    return loaded, failed


def failures(group: str) -> list[PluginFailure]:
    """The entry points of ``group`` installed now that failed to load in this process."""
    installed = {(group, e.name, e.value, _distribution(e)) for e in entry_points(group)}
    with _lock:
        return [f for key, f in _failed.items() if key in installed]


__all__ = [
    "RULES_GROUP",
    "STORES_GROUP",
    "LoadedPlugin",
    "PluginFailure",
    "entry_points",
    "failures",
    "load_plugins",
    "plugin_names",
]
