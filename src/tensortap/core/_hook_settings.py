"""The parameters of a hook configuration, parsed once: strings as a job or a JSON file writes them
(``"save_interval": "10"``, ``"eval.save_steps": "1,2"``, ``"norms": "l2"``,
``"include_regex": "fc1.*"``) into the typed values a hook takes (:class:`SaveConfig`,
:class:`ReductionConfig`, names). :class:`HookSettings` holds the hook-wide parameters,
:class:`CollectionSettings` one collection's; :mod:`tensortap.hook._config` composes them into a
:class:`~tensortap.hook._config.HookConfig`. Every mistake is an :class:`InvalidConfigError`
naming the key and value."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tensortap.core._collections import Collection, CollectionManager
from tensortap.core._modes import ModeKeys, parse_mode
from tensortap.core._reduction_config import ReductionConfig
from tensortap.core._save_budget import parse_save_budget
from tensortap.core._save_config import SaveConfig, SaveConfigMode
from tensortap.exceptions import InvalidConfigError

_SAVE_KEYS = ("save_interval", "save_steps", "start_step", "end_step")
_REDUCTION_KEYS = (
    "reductions",
    "abs_reductions",
    "norms",
    "abs_norms",
    "save_raw_tensor",
    "save_shape",
)
_MODE_PREFIXES = {"train": "TRAIN", "eval": "EVAL", "predict": "PREDICT", "global": "GLOBAL"}
_COLLECTION_KEYS = frozenset((*_SAVE_KEYS, *_REDUCTION_KEYS, "include_regex", "exclude_regex"))
_HOOK_KEYS = frozenset(
    (*_SAVE_KEYS, *_REDUCTION_KEYS, "include_regex", "include_collections", "save_budget")
)


def _split(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise InvalidConfigError(f"expected a list of names or a comma-separated string, got {value!r}")


def _per_mode(key: str) -> tuple[ModeKeys | None, str]:
    """The mode a parameter is for (None: every mode) and its key without the mode: the one
    place the per-mode spelling ``<mode>.<key>`` is read."""
    prefix, _, rest = key.partition(".")
    if rest and prefix in _MODE_PREFIXES:
        return parse_mode(_MODE_PREFIXES[prefix]), rest
    return None, key


def _check_keys(params: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    if not isinstance(params, Mapping):
        raise InvalidConfigError(f"{where} must be a JSON object, got {params!r}")
    for key in params:
        mode, base = _per_mode(key)
        if mode is not None and base not in _SAVE_KEYS:
            raise InvalidConfigError(
                f"{where}: {key!r} is not a per-mode key; per mode, only {list(_SAVE_KEYS)} "
                "can be set (as in 'train.save_interval')"
            )
        if base not in allowed:
            raise InvalidConfigError(
                f"{where}: unknown parameter {key!r}; accepted: {sorted(allowed)} and "
                "per-mode save keys such as 'eval.save_interval'"
            )


def _save_config(params: Mapping[str, Any], where: str) -> SaveConfig | None:
    base = {k: params[k] for k in _SAVE_KEYS if k in params}
    per_mode: dict[ModeKeys, dict[str, Any]] = {}
    for key, value in params.items():
        mode, rest = _per_mode(key)
        if mode is not None:
            per_mode.setdefault(mode, {})[rest] = value
    if not base and not per_mode:
        return None
    try:
        flat = SaveConfigMode.from_dict(base)
        modes = {m: SaveConfigMode.from_dict({**base, **v}) for m, v in per_mode.items()}
        return SaveConfig(
            flat.save_interval, flat.start_step, flat.end_step, flat.save_steps, modes
        )
    except InvalidConfigError as exc:
        raise InvalidConfigError(f"{where}: {exc}") from None


def _reduction_config(params: Mapping[str, Any], where: str) -> ReductionConfig | None:
    given = {k: params[k] for k in _REDUCTION_KEYS if k in params}
    if not given:
        return None
    try:
        return ReductionConfig.from_dict(given)
    except InvalidConfigError as exc:
        raise InvalidConfigError(f"{where}: {exc}") from None


class HookSettings(Mapping[str, Any]):
    """The hook-wide parameters: as given (a mapping of strings in smdebug's spelling, which
    is what JSON holds) and parsed, once, when made: :attr:`save_config`,
    :attr:`reduction_config`, :attr:`include_regex` and :attr:`include_collections` are the
    typed values a hook takes."""

    __slots__ = (
        "_given",
        "include_collections",
        "include_regex",
        "reduction_config",
        "save_budget",
        "save_config",
    )

    save_config: SaveConfig | None
    reduction_config: ReductionConfig | None
    include_regex: tuple[str, ...]
    #: as given (None when not), without the configured collections HookConfig adds
    include_collections: tuple[str, ...] | None
    #: the save budget (``core._save_budget``): a share of training time, None when off
    save_budget: float | None

    def __init__(self, parameters: Mapping[str, Any] | None = None) -> None:
        given = {} if parameters is None else parameters
        _check_keys(given, _HOOK_KEYS, "hook_parameters")
        self._given = dict(given)
        self.save_config = _save_config(given, "hook_parameters")
        self.reduction_config = _reduction_config(given, "hook_parameters")
        self.include_regex = _split(given.get("include_regex"))
        self.include_collections = _split(given.get("include_collections")) or None
        self.save_budget = parse_save_budget(
            given.get("save_budget"), "hook_parameters save_budget"
        )

    def with_include_collections(self, names: tuple[str, ...]) -> HookSettings:
        """These settings saving the collections ``names`` (nothing else is parsed again)."""
        new = object.__new__(HookSettings)
        for slot in self.__slots__:
            object.__setattr__(new, slot, getattr(self, slot))
        new._given = {**self._given, "include_collections": ",".join(names)}
        new.include_collections = tuple(names) or None
        return new

    def __getitem__(self, key: str) -> Any:
        return self._given[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._given)

    def __len__(self) -> int:
        return len(self._given)

    def __repr__(self) -> str:
        return f"HookSettings({self._given!r})"


@dataclass(frozen=True)
class CollectionSettings:
    """The configuration of one collection: its name and its (string) parameters, parsed once
    when made into :attr:`save_config`, :attr:`reduction_config`, :attr:`include_regex` and
    :attr:`exclude_regex`."""

    name: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    save_config: SaveConfig | None = field(init=False, compare=False, repr=False)
    reduction_config: ReductionConfig | None = field(init=False, compare=False, repr=False)
    include_regex: tuple[str, ...] | None = field(init=False, compare=False, repr=False)
    exclude_regex: tuple[str, ...] | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidConfigError(
                f"a collection name must be a non-empty string, got {self.name!r}"
            )
        where = f"collection {self.name!r}"
        params = self.parameters
        _check_keys(params, _COLLECTION_KEYS, where)
        object.__setattr__(self, "parameters", dict(params))
        for key in ("include_regex", "exclude_regex"):
            object.__setattr__(self, key, _split(params[key]) if key in params else None)
        object.__setattr__(self, "save_config", _save_config(params, where))
        object.__setattr__(self, "reduction_config", _reduction_config(params, where))
        # Validate now (a bad regex), not at the first step.
        self.apply(CollectionManager())

    def apply(self, manager: CollectionManager) -> Collection:
        """Create or update the collection in ``manager`` from these settings."""
        coll = manager.get(self.name)
        if self.include_regex is not None:
            coll.include(list(self.include_regex))
        if self.exclude_regex is not None:
            coll.exclude(list(self.exclude_regex))
        if self.save_config is not None:
            coll.save_config = self.save_config
        if self.reduction_config is not None:
            coll.reduction_config = self.reduction_config
        return coll

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "parameters": dict(self.parameters)}
