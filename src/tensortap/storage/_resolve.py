"""One function turns what a user passes (a path, a URL, a Store) into a Store.

Each backend registers its URL scheme where it is defined, with one :func:`register_store`
call (``file`` and plain paths: :mod:`~tensortap.storage._local`; ``memory``:
:mod:`~tensortap.storage._memory`; ``s3``: :mod:`~tensortap.storage._s3`). Any other scheme
(``gs://``, a typo) is refused with the list of those known.

A backend installed as a distribution declares its scheme as an entry point of the group
``tensortap.stores`` (:mod:`tensortap.core._plugins`): on a scheme nobody registered, the
entry points of that name are loaded (a module that registers the scheme on import, or a
factory registered here under the entry point's name), so every process opens it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from types import ModuleType

from tensortap.core._plugins import STORES_GROUP, LoadedPlugin, load_plugins, plugin_names
from tensortap.exceptions import InvalidConfigError
from tensortap.storage._base import Store

StoreFactory = Callable[[str], Store]
_FACTORIES: dict[str, StoreFactory] = {}
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
#: The scheme whose factory also opens plain directory paths.
LOCAL_SCHEME = "file"


def register_store(scheme: str, factory: StoreFactory) -> None:
    """Make ``scheme://...`` locations open with ``factory(location)`` (the whole location,
    scheme included); registering a scheme again replaces its factory."""
    if not isinstance(scheme, str) or not _SCHEME.fullmatch(scheme.lower()):
        raise InvalidConfigError(
            f"a URL scheme is a letter followed by letters, digits, '+', '-' or '.' (as 's3' "
            f"or 'mem'), without '://'; got {scheme!r}"
        )
    if not callable(factory):
        raise InvalidConfigError(
            f"register_store needs a factory (a callable taking the location), got {factory!r}"
        )
    _FACTORIES[scheme.lower()] = factory


def unregister_store(scheme: str) -> None:
    """Forget the factory registered for ``scheme`` (tests, notebooks): its locations are
    refused again as a scheme no backend registered. Unknown schemes are ignored."""
    if isinstance(scheme, str) and scheme.lower() != LOCAL_SCHEME:
        _FACTORIES.pop(scheme.lower(), None)


def known_schemes() -> list[str]:
    """The URL schemes a Store can be opened for, sorted: those registered, and those of the
    backends installed with a ``tensortap.stores`` entry point (loaded when first opened)."""
    return sorted(set(_FACTORIES) | {n.lower() for n in plugin_names(STORES_GROUP)})


def _register_plugin(plugin: LoadedPlugin) -> None:
    """An entry point's object: a module registers its schemes itself when imported; a factory
    (a callable taking the location, a Store class) is registered under the entry point's name."""
    if isinstance(plugin.loaded, ModuleType):
        return
    if not callable(plugin.loaded):
        raise InvalidConfigError(
            f"a tensortap.stores entry point names a module that registers its scheme, or a "
            f"factory taking the location; got {plugin.loaded!r}"
        )
    register_store(plugin.name.lower(), plugin.loaded)


def _load_backend(scheme: str) -> str | None:
    """Load the installed backends for ``scheme`` (entry points of that name); None when one
    registered it, else what to add to the error (why the installed ones did not)."""
    loaded, failed = load_plugins(
        STORES_GROUP, lambda name: name.lower() == scheme, _register_plugin
    )
    if scheme in _FACTORIES:
        return None
    said = [f.describe() for f in failed]
    said += [
        f"the entry point {p.name} = {p.value!r} of the distribution {p.distribution} loaded but "
        f"did not register {scheme}:// (call tensortap.storage.register_store({scheme!r}, ...) "
        "in that module, or name a factory)"
        for p in loaded
    ]
    return "; ".join(said)


def _scheme(location: str) -> str | None:
    scheme, sep, _ = location.partition("://")
    return scheme.lower() if sep else None


def check_location(location: str) -> None:
    """Raise InvalidConfigError, naming the known schemes, for a URL no backend opens."""
    scheme = _scheme(location)
    if scheme is None or scheme in _FACTORIES:
        return
    why = _load_backend(scheme)
    if why is None:
        return
    raise InvalidConfigError(
        f"no storage backend for {scheme}:// (in {location!r}); known schemes: "
        f"{', '.join(known_schemes())}, or a plain directory path. A backend makes its "
        "scheme known with tensortap.storage.register_store, or from an installed package "
        "with a tensortap.stores entry point"
        + (f". Installed for {scheme}://: {why}" if why else "")
    )


def open_store(location: str | os.PathLike[str] | Store) -> Store:
    """A Store for a local path, a URL of a registered scheme (``file://``, ``memory://``,
    ``s3://``, ...), or a Store itself."""
    if isinstance(location, Store):
        return location
    if isinstance(location, os.PathLike):
        location = os.fspath(location)
    if not isinstance(location, str) or not location:
        raise InvalidConfigError(
            f"expected a trial location (a directory path or URL), got {location!r}"
        )
    check_location(location)
    return _FACTORIES[_scheme(location) or LOCAL_SCHEME](location)


def local_path(location: str | os.PathLike[str] | Store) -> str | None:
    """The directory a location names when it is local (a path or a ``file://`` URL), else
    None (another scheme, or a Store)."""
    if isinstance(location, Store):
        return None
    text = os.fspath(location)
    if text.startswith("file://"):
        return text[len("file://") :]
    return None if "://" in text else text


def what_is_there(store: Store) -> str:
    """Words for a store that holds nothing, for messages: whether its directory is missing or
    empty (a mistyped path is the usual cause)."""
    if not store.capabilities.local_path:
        return "nothing is stored under it"
    return "it is an empty directory" if store.local_directory().is_dir() else "it does not exist"
