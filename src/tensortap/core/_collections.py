"""Collections: named groups of tensors, each with its own save and reduction config.

A tensor belongs to a collection if it was added by name, or if one of the collection's
include regexes matches it (``re.search``) and none of its exclude regexes does. Explicitly
added names are never excluded.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from tensortap.core._reduction_config import ReductionConfig
from tensortap.core._safe_regex import Matcher, compile_untrusted
from tensortap.core._save_config import SaveConfig
from tensortap.core._vitals import VITALS, vitals_save_config
from tensortap.exceptions import FormatError, InvalidConfigError, TensortapError

logger = logging.getLogger(__name__)


class CollectionKeys:
    """Names of the collections every hook knows from the start."""

    ALL = "all"
    DEFAULT = "default"
    LOSSES = "losses"
    METRICS = "metrics"
    SCALARS = "scalars"
    WEIGHTS = "weights"
    BIASES = "biases"
    GRADIENTS = "gradients"
    INPUTS = "inputs"
    OUTPUTS = "outputs"


#: The weights before the first update (saved once by the framework hooks that can, as
#: ``initial/<weight name>``), so that the first update can be judged.
INITIAL_WEIGHTS = "initial_weights"
INITIAL_PREFIX = "initial/"
#: Facts about the training loop itself (which parameters the optimizers hold, whether
#: gradients are cleared, ...), saved as ``training_loop/<fact>`` by the hooks that can see them.
TRAINING_LOOP = "training_loop"
#: The training-loop fact saved at the first step of a new stage of training (a ``fit`` of
#: another model, or of one compiled again with another loss), its number from 1: the rules
#: that compare losses over time start again there.
STAGE = f"{TRAINING_LOOP}/stage"
#: The threshold gradients were clipped to before the update (``gradient_clip/max_norm``,
#: ``gradient_clip/max_value``), saved by the hooks that see the clip, at the steps where
#: gradients are saved: the gradients saved are the ones before the clip.
GRADIENT_CLIP = "gradient_clip"
#: Mixture-of-experts router statistics, one small vector per MoE layer (tokens per expert over
#: the saving window, summed over ranks) and a few numbers derived from it, saved as
#: ``router/<layer>/<statistic>`` by the hooks that can see the routers (the PyTorch hook).
ROUTER = "router"
ROUTER_PREFIX = "router/"

BUILTIN_COLLECTIONS = (
    CollectionKeys.ALL,
    CollectionKeys.DEFAULT,
    CollectionKeys.LOSSES,
    CollectionKeys.METRICS,
    CollectionKeys.SCALARS,
    CollectionKeys.WEIGHTS,
    CollectionKeys.BIASES,
    CollectionKeys.GRADIENTS,
    CollectionKeys.INPUTS,
    CollectionKeys.OUTPUTS,
)


#: How alike (difflib's ratio, compared in lower case) an included name must be to a known
#: collection's to be warned about as a possible misspelling of it: 'gradient' (0.94) and
#: 'loss' (0.8) are, a collection of one's own such as 'one_weight' (0.71 to 'weights') is not.
TYPO_CUTOFF = 0.8


def check_included(names: Iterable[str], known: Iterable[str], hook: str) -> list[str]:
    """Warn about included collection names that are not known but nearly the name of one
    that is, and return them. Such a name is a new collection of the user's own, as in
    smdebug (``include_collections=["ReluActivation"]``, then
    ``hook.get_collection("ReluActivation").include(...)``), never refused: it may also be a
    typo, which would save nothing at all, so the warning names the close built-in one."""
    choices = sorted(set(known))
    near = []
    for name in names:
        if not isinstance(name, str) or name in choices:
            continue
        close = difflib.get_close_matches(name.lower(), choices, n=1, cutoff=TYPO_CUTOFF)
        if close:
            near.append(f"{name!r} (did you mean {close[0]!r}?)")
    if near:
        logger.warning(
            "include_collections names %s: no collection %s knows (it knows %s), so each is "
            "a new collection of your own, empty until you add to it "
            "(hook.get_collection(name).include(regex)); if you meant the built-in one, fix "
            "the name",
            ", ".join(near),
            hook,
            ", ".join(choices),
        )
    return near


def _compile(pattern: object, what: str) -> re.Pattern[str]:
    if not isinstance(pattern, str):
        raise InvalidConfigError(f"{what} must be a regex string, got {pattern!r}")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise InvalidConfigError(
            f"invalid {what} {pattern!r}: {exc}; pass a Python regular expression"
        ) from exc


def _as_list(value: str | Iterable[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return list(value)


class Collection:
    """A named group of tensors with optional save and reduction configs of its own."""

    def __init__(
        self,
        name: str,
        include_regex: str | Iterable[str] | None = None,
        exclude_regex: str | Iterable[str] | None = None,
        tensor_names: Iterable[str] | None = None,
        save_config: SaveConfig | None = None,
        reduction_config: ReductionConfig | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidConfigError(f"a collection name must be a non-empty string, got {name!r}")
        self.name = name
        self._include: list[Matcher] = []
        self._exclude: list[Matcher] = []
        self._tensor_names: set[str] = set()
        self._save_config: SaveConfig | None = None
        self._reduction_config: ReductionConfig | None = None
        self._listeners: list[Callable[[], None]] = []
        self.include(_as_list(include_regex))
        self.exclude(_as_list(exclude_regex))
        for tname in tensor_names or ():
            self.add_tensor_name(tname)
        self.save_config = save_config
        self.reduction_config = reduction_config

    # -- change notification (the hook re-plans and re-records collections on change) --
    def _subscribe(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()

    # -- membership --
    @property
    def include_regex(self) -> list[str]:
        return [p.pattern for p in self._include]

    @property
    def exclude_regex(self) -> list[str]:
        return [p.pattern for p in self._exclude]

    @property
    def tensor_names(self) -> set[str]:
        return set(self._tensor_names)

    def include(self, regex: str | Iterable[str]) -> None:
        """Add include regexes (matched with ``re.search``)."""
        new = [_compile(p, "include_regex") for p in _as_list(regex)]
        if new:
            self._include.extend(new)
            self._changed()

    def exclude(self, regex: str | Iterable[str]) -> None:
        """Add exclude regexes: a tensor they match joins only if added by name."""
        new = [_compile(p, "exclude_regex") for p in _as_list(regex)]
        if new:
            self._exclude.extend(new)
            self._changed()

    def add_tensor_name(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidConfigError(f"a tensor name must be a non-empty string, got {name!r}")
        if name not in self._tensor_names:
            self._tensor_names.add(name)
            self._changed()

    def add(self, names: str | Iterable[str]) -> None:
        for name in _as_list(names):
            self.add_tensor_name(name)

    def has_tensor(self, name: str) -> bool:
        return name in self._tensor_names

    def matches(self, name: str) -> bool:
        """True if the tensor belongs to this collection (by name, or by regex and not excluded)."""
        if name in self._tensor_names:
            return True
        if not any(p.search(name) for p in self._include):
            return False
        return not any(p.search(name) for p in self._exclude)

    # -- configs --
    @property
    def save_config(self) -> SaveConfig | None:
        return self._save_config

    @save_config.setter
    def save_config(self, value: SaveConfig | None) -> None:
        if value is not None and not isinstance(value, SaveConfig):
            raise InvalidConfigError(f"save_config must be a SaveConfig or None, got {value!r}")
        self._save_config = value
        self._changed()

    @property
    def reduction_config(self) -> ReductionConfig | None:
        return self._reduction_config

    @reduction_config.setter
    def reduction_config(self, value: ReductionConfig | None) -> None:
        if value is not None and not isinstance(value, ReductionConfig):
            raise InvalidConfigError(
                f"reduction_config must be a ReductionConfig or None, got {value!r}"
            )
        self._reduction_config = value
        self._changed()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "include_regex": self.include_regex,
            "exclude_regex": self.exclude_regex,
            "tensor_names": sorted(self._tensor_names),
            "save_config": None if self._save_config is None else self._save_config.to_dict(),
            "reduction_config": None
            if self._reduction_config is None
            else self._reduction_config.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Collection:
        save = data.get("save_config")
        reduction = data.get("reduction_config")
        return cls(
            name=data["name"],
            include_regex=data.get("include_regex") or [],
            exclude_regex=data.get("exclude_regex") or [],
            tensor_names=data.get("tensor_names") or [],
            save_config=None if save is None else SaveConfig.from_dict(save),
            reduction_config=None if reduction is None else ReductionConfig.from_dict(reduction),
        )

    @classmethod
    def from_stored(cls, data: object, what: str = "collection") -> tuple[Collection, str | None]:
        """A collection read from a trial (data, not code): FormatError for a malformed entry.

        Its regexes are compiled with RE2 (:mod:`~tensortap.core._safe_regex`), so matching cannot
        hang; when one cannot be, the collection keeps no regex (its listed tensor names, which
        the writer keeps complete, decide membership) and the reason is returned with it."""
        if not isinstance(data, Mapping):
            raise FormatError(f"{what} is not an object")
        name = data.get("name")
        include, exclude = data.get("include_regex") or [], data.get("exclude_regex") or []
        names = data.get("tensor_names") or []
        for field, value in (("include_regex", include), ("exclude_regex", exclude)):
            if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
                raise FormatError(f"{what}: {field} is not a list of strings")
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise FormatError(f"{what}: tensor_names is not a list of names")
        try:
            save, reduce = data.get("save_config"), data.get("reduction_config")
            coll = cls(
                name=name,  # type: ignore[arg-type]  # checked by the constructor
                tensor_names=names,
                save_config=None if save is None else SaveConfig.from_dict(save),
                reduction_config=None if reduce is None else ReductionConfig.from_dict(reduce),
            )
        except (TensortapError, TypeError, ValueError, AttributeError) as exc:
            raise FormatError(f"{what} is malformed: {exc}") from None
        try:
            coll._include = [compile_untrusted(p, f"include_regex of {name}") for p in include]
            coll._exclude = [compile_untrusted(p, f"exclude_regex of {name}") for p in exclude]
        except FormatError as exc:
            coll._include, coll._exclude = [], []
            return coll, str(exc)
        return coll, None

    def __repr__(self) -> str:
        return (
            f"Collection(name={self.name!r}, include_regex={self.include_regex}, "
            f"exclude_regex={self.exclude_regex}, tensor_names={len(self._tensor_names)} names)"
        )


class CollectionManager:
    """The collections of one hook (never global). Counts changes so they can be re-recorded."""

    def __init__(self, create_builtins: bool = True) -> None:
        self._collections: dict[str, Collection] = {}
        self.version = 0
        if create_builtins:
            for name in BUILTIN_COLLECTIONS:
                self.get(name)
            self._collections[CollectionKeys.ALL].include(".*")
            # every step's vital signs, whatever the hook's schedule (core._vitals)
            self.add(Collection(VITALS, save_config=vitals_save_config()))

    def _bump(self) -> None:
        self.version += 1

    def add(self, collection: Collection) -> Collection:
        """Add (or replace) a collection."""
        if not isinstance(collection, Collection):
            raise InvalidConfigError(f"expected a Collection, got {collection!r}")
        collection._subscribe(self._bump)
        self._collections[collection.name] = collection
        self._bump()
        return collection

    def get(self, name: str, create: bool = True) -> Collection:
        """The collection of this name, created empty if missing (unless ``create`` is false)."""
        found = self._collections.get(name)
        if found is None:
            if not create:
                raise KeyError(name)
            found = self.add(Collection(name))
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._collections

    def __iter__(self) -> Iterator[Collection]:
        return iter(list(self._collections.values()))

    def names(self) -> list[str]:
        return sorted(self._collections)

    def to_dict(self) -> dict[str, Any]:
        return {"collections": [c.to_dict() for c in self._collections.values()]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CollectionManager:
        manager = cls(create_builtins=False)
        for entry in data.get("collections", []):
            manager.add(Collection.from_dict(entry))
        return manager
