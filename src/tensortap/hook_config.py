"""A hook configured from JSON: for zero-code-change runs and the job runner.

The file says where to write and what to save::

    {
      "out_dir": "runs/job1",
      "hook_parameters": {"save_interval": "10", "eval.save_interval": "1", "norms": "l2"},
      "collection_configurations": [
        {"name": "weights"},
        {"name": "gradients", "parameters": {"save_interval": "5", "norms": "l2"}},
        {"name": "custom", "parameters": {"include_regex": "fc1.*"}}
      ],
      "writer_options": {"flush_secs": 5, "when_full": "drop"}
    }

smdebug's spelling (``LocalPath``, ``HookParameters``, ``CollectionConfigurations`` with
``CollectionName``/``CollectionParameters``) is accepted too. Values may be strings, as a job
configuration writes them. Parameters, in ``hook_parameters`` and per collection:

- save schedule: ``save_interval``, ``save_steps`` ("1,2,3"), ``start_step``, ``end_step``, and
  per mode ``train.save_interval``, ``eval.save_steps``, ... (modes: train, eval, predict, global);
- reductions: ``reductions``, ``abs_reductions``, ``norms``, ``abs_norms``, ``save_raw_tensor``,
  ``save_shape``;
- membership: ``include_regex`` (and, per collection, ``exclude_regex``);
- hook only: ``include_collections`` ("weights,losses").

The collections saved are ``include_collections`` when given, else the configured collections,
else the hook's defaults. ``writer_options`` sets the background writer
(:class:`~tensortap.writer.WriterOptions`: ``flush_secs``, ``idle_flush_secs``, ``when_full``,
...). Every mistake is an :class:`InvalidConfigError` naming the key and value.

The JSON is parsed once, here, at the edge: a :class:`HookConfig` holds the parsed values
(:class:`HookSettings` for the hook-wide parameters, :class:`CollectionSettings` per
collection, :class:`~tensortap.writer.WriterOptions`), and hooks take those, never the strings.
Per mode, the one spelling in JSON is smdebug's ``<mode>.<key>`` (``eval.save_interval``); in
the parsed values it is :attr:`SaveConfig.mode_save_configs`, keyed by :class:`ModeKeys`.
:func:`read_config` reads a process's file once, whoever asks for it (the attachment, a trainer
callback, a hook the script makes).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tensortap.core.collections import Collection, CollectionManager
from tensortap.core.modes import ModeKeys, parse_mode
from tensortap.core.reduction_config import ReductionConfig
from tensortap.core.save_config import SaveConfig, SaveConfigMode
from tensortap.exceptions import InvalidConfigError
from tensortap.writer.options import WriterOptions

_H = TypeVar("_H")

CONFIG_ENV = "TENSORTAP_CONFIG"
#: The job directory, in the environment of a job's training process: a hook the script makes
#: writes the job's trial (as smdebug's wrote to the SageMaker job's output).
JOB_ENV = "TENSORTAP_JOB_DIR"
"""The environment variable holding the path of a hook's JSON configuration."""

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
_HOOK_KEYS = frozenset((*_SAVE_KEYS, *_REDUCTION_KEYS, "include_regex", "include_collections"))


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
        "save_config",
    )

    save_config: SaveConfig | None
    reduction_config: ReductionConfig | None
    include_regex: tuple[str, ...]
    #: as given (None when not), without the configured collections HookConfig adds
    include_collections: tuple[str, ...] | None

    def __init__(self, parameters: Mapping[str, Any] | None = None) -> None:
        given = {} if parameters is None else parameters
        _check_keys(given, _HOOK_KEYS, "hook_parameters")
        self._given = dict(given)
        self.save_config = _save_config(given, "hook_parameters")
        self.reduction_config = _reduction_config(given, "hook_parameters")
        self.include_regex = _split(given.get("include_regex"))
        self.include_collections = _split(given.get("include_collections")) or None

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


def _first(data: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if key in data:
            return data[key]
    return None


@dataclass(frozen=True)
class HookConfig:
    """Everything a hook needs, parsed and validated when built (see the module docstring for
    the JSON). ``hook_parameters`` may be given as a mapping of strings (it is parsed into
    :class:`HookSettings`) or as :class:`HookSettings` (kept: nothing is parsed again)."""

    out_dir: str
    hook_parameters: Mapping[str, Any] = field(default_factory=dict)
    collections: tuple[CollectionSettings, ...] = ()
    #: A job's stop-request file: training stops at the step boundary after it appears.
    stop_file: str | None = None
    #: Where the hook writes TensorBoard event files (None: no TensorBoard output).
    tensorboard_dir: str | None = None
    #: The background writer's options (None: the defaults).
    writer_options: WriterOptions | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.out_dir, str) or not self.out_dir:
            raise InvalidConfigError(
                f"out_dir must be a non-empty path or URL string, got {self.out_dir!r}"
            )
        for key in ("stop_file", "tensorboard_dir"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidConfigError(f"{key} must be a path string, got {value!r}")
        if not isinstance(self.hook_parameters, HookSettings):
            object.__setattr__(self, "hook_parameters", HookSettings(self.hook_parameters))
        collections = tuple(self.collections)
        for settings in collections:
            if not isinstance(settings, CollectionSettings):
                raise InvalidConfigError(
                    f"collections must hold CollectionSettings, got {settings!r}"
                )
        object.__setattr__(self, "collections", collections)
        options = self.writer_options
        if options is not None and not isinstance(options, WriterOptions):
            raise InvalidConfigError(
                f"writer_options must be WriterOptions (or, in JSON, an object such as "
                f'{{"flush_secs": 5}}), got {options!r}'
            )

    @property
    def settings(self) -> HookSettings:
        """The parsed hook-wide parameters."""
        assert isinstance(self.hook_parameters, HookSettings)  # made so in __post_init__
        return self.hook_parameters

    @property
    def save_config(self) -> SaveConfig | None:
        return self.settings.save_config

    @property
    def reduction_config(self) -> ReductionConfig | None:
        return self.settings.reduction_config

    @property
    def include_regex(self) -> tuple[str, ...]:
        return self.settings.include_regex

    @property
    def include_collections(self) -> tuple[str, ...] | None:
        given = self.settings.include_collections
        if given:
            return given
        if self.collections:
            return tuple(c.name for c in self.collections)
        return None

    def hook_kwargs(self) -> dict[str, Any]:
        """Constructor arguments for any tensortap hook."""
        kwargs: dict[str, Any] = {
            "out_dir": self.out_dir,
            "save_config": self.save_config,
            "reduction_config": self.reduction_config,
            "include_collections": self.include_collections,
            "include_regex": list(self.include_regex) or None,
        }
        if self.writer_options is not None:
            kwargs["writer_options"] = self.writer_options
        if self.stop_file is not None:
            kwargs["stop_file"] = self.stop_file
        if self.tensorboard_dir is not None:
            kwargs["export_tensorboard"] = True
            kwargs["tensorboard_dir"] = self.tensorboard_dir
        return kwargs

    def create_hook(self, cls: Callable[..., _H], **overrides: Any) -> _H:
        """A hook of class ``cls`` made from this configuration, its collections configured.

        A configured collection is included once configured: its name is the user's, never
        taken for a misspelling of a known collection (the hook refuses those)."""
        kwargs = {**self.hook_kwargs(), **overrides}
        included = kwargs.get("include_collections")
        included = [included] if isinstance(included, str) else included
        # a configured collection of the user's own is included once configured; the hook's
        # own collections are included when it is made (some act then: initial_weights)
        known = set(getattr(cls, "known_collections", ()))
        configured = {c.name for c in self.collections} - known
        if included is not None:
            kwargs["include_collections"] = [n for n in included if n not in configured]
        hook = cls(**kwargs)
        self.configure(hook.collection_manager)  # type: ignore[attr-defined]
        for name in included or ():
            if name in configured:
                hook.include_collection(name)  # type: ignore[attr-defined]
        return hook

    def configure(self, manager: CollectionManager) -> None:
        """Apply the per-collection settings to a hook's collections."""
        for settings in self.collections:
            settings.apply(manager)

    # -- (de)serialisation --
    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "out_dir": self.out_dir,
            "hook_parameters": dict(self.hook_parameters),
            "collection_configurations": [c.to_dict() for c in self.collections],
        }
        for key in ("stop_file", "tensorboard_dir"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.writer_options is not None:
            data["writer_options"] = self.writer_options.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HookConfig:
        if not isinstance(data, Mapping):
            raise InvalidConfigError(f"a hook configuration must be a JSON object, got {data!r}")
        known = {
            "out_dir",
            "LocalPath",
            "hook_parameters",
            "HookParameters",
            "collection_configurations",
            "CollectionConfigurations",
            "stop_file",
            "tensorboard_dir",
            "writer_options",
        }
        unknown = set(data) - known
        if unknown:
            raise InvalidConfigError(
                f"unknown keys {sorted(unknown)} in the hook configuration; accepted: "
                "out_dir, hook_parameters, collection_configurations, stop_file, "
                "tensorboard_dir, writer_options (or smdebug's "
                "LocalPath, HookParameters, CollectionConfigurations)"
            )
        out_dir = _first(data, "out_dir", "LocalPath")
        if out_dir is None:
            raise InvalidConfigError(
                'the hook configuration has no out_dir: add "out_dir": "path/or/url"'
            )
        colls = []
        entries = _first(data, "collection_configurations", "CollectionConfigurations") or []
        if not isinstance(entries, list | tuple):
            raise InvalidConfigError(
                f"collection_configurations must be a list of objects, got {entries!r}"
            )
        for entry in entries:
            if not isinstance(entry, Mapping):
                raise InvalidConfigError(
                    f"a collection configuration must be an object, got {entry!r}"
                )
            name = _first(entry, "name", "CollectionName")
            params = _first(entry, "parameters", "CollectionParameters") or {}
            colls.append(CollectionSettings(name, params))
        return cls(
            out_dir=out_dir,
            hook_parameters=_first(data, "hook_parameters", "HookParameters") or {},
            collections=tuple(colls),
            stop_file=data.get("stop_file"),
            tensorboard_dir=data.get("tensorboard_dir"),
            writer_options=_writer_options(data.get("writer_options")),
        )

    @classmethod
    def from_json_file(cls, path: str | os.PathLike[str] | None = None) -> HookConfig:
        """Read a configuration file (by default the one named by ``$TENSORTAP_CONFIG``)."""
        path = _config_path(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidConfigError(
                f"cannot read the hook configuration {path} as UTF-8 text: {exc}"
            ) from None
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:  # bad JSON, a 5,000-digit number, nesting
            reason = "it is nested too deeply" if isinstance(exc, RecursionError) else exc
            raise InvalidConfigError(
                f"the hook configuration {path} is not valid JSON: {reason}"
            ) from None
        return cls.from_dict(data)


def _writer_options(given: Any) -> WriterOptions | None:
    if given is None:
        return None
    try:
        return WriterOptions.from_dict(given)
    except InvalidConfigError as exc:
        raise InvalidConfigError(f"writer_options: {exc}") from None


def _config_path(path: str | os.PathLike[str] | None) -> str | os.PathLike[str]:
    if path is None:
        path = os.environ.get(CONFIG_ENV)
        if not path:
            raise InvalidConfigError(
                f"no hook configuration: pass a path, or set {CONFIG_ENV} to a JSON file"
            )
    return path


_read: dict[str, tuple[tuple[int, int], HookConfig]] = {}
_read_lock = threading.Lock()


def read_config(path: str | os.PathLike[str] | None = None) -> HookConfig:
    """The configuration in the JSON file ``path`` (by default ``$TENSORTAP_CONFIG``), read and
    parsed once per process: the attachment, a trainer callback and a hook the script makes
    share it (a file changed since is read again)."""
    path = _config_path(path)
    key = os.path.abspath(path)
    try:
        stat = os.stat(key)
    except OSError:
        return HookConfig.from_json_file(path)  # says why it cannot be read
    stamp = (stat.st_mtime_ns, stat.st_size)
    with _read_lock:
        known = _read.get(key)
        if known is not None and known[0] == stamp:
            return known[1]
    config = HookConfig.from_json_file(path)
    with _read_lock:
        _read[key] = (stamp, config)
    return config
