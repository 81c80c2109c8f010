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
- hook only: ``include_collections`` ("weights,losses"), ``save_budget`` ("0.05" or "off": the
  share of training time the hook's own TRAIN schedule may spend saving, widened past it;
  ``tensortap.core._save_budget``; a job sets it for the schedule it chooses).

The collections saved are ``include_collections`` when given, else the configured collections,
else the hook's defaults. ``writer_options`` sets the background writer
(:class:`~tensortap.writer.WriterOptions`: ``flush_secs``, ``idle_flush_secs``, ``when_full``,
...). Every mistake is an :class:`InvalidConfigError` naming the key and value.

The JSON is parsed once, here, at the edge: a :class:`HookConfig` holds the parsed values
(:class:`HookSettings` for the hook-wide parameters, :class:`CollectionSettings` per
collection, both parsed in :mod:`tensortap.core._hook_settings`;
:class:`~tensortap.writer.WriterOptions`), and hooks take those, never the strings.
Per mode, the one spelling in JSON is smdebug's ``<mode>.<key>`` (``eval.save_interval``); in
the parsed values it is :attr:`SaveConfig.mode_save_configs`, keyed by :class:`ModeKeys`.
:func:`read_config` reads a process's file once, whoever asks for it (the attachment, a trainer
callback, a hook the script makes).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tensortap.core._collections import CollectionManager
from tensortap.core._hook_settings import CollectionSettings, HookSettings
from tensortap.core._reduction_config import ReductionConfig
from tensortap.core._save_config import SaveConfig
from tensortap.exceptions import InvalidConfigError
from tensortap.writer._options import WriterOptions

_H = TypeVar("_H")

# the parsed parameters (re-exported: jobs/_specs.py, rules/ and tests import them from here)
__all__ = [
    "CONFIG_ENV",
    "JOB_ENV",
    "CollectionSettings",
    "HookConfig",
    "HookSettings",
    "read_config",
]

CONFIG_ENV = "TENSORTAP_CONFIG"
#: The job directory, in the environment of a job's training process: a hook the script makes
#: writes the job's trial (as smdebug's wrote to the SageMaker job's output).
JOB_ENV = "TENSORTAP_JOB_DIR"
#: Under ``tensortap run`` the job guards the checkpoints of Hugging Face and Lightning
#: Trainers (no save of NaN weights, no resume from one) unless this is ``0``
#: (``tensortap run --no-checkpoint-guard``).
CHECKPOINT_GUARD_ENV = "TENSORTAP_CHECKPOINT_GUARD"


def checkpoint_guard_on() -> bool:
    """Whether the job guards the trainers' checkpoints (``$TENSORTAP_CHECKPOINT_GUARD`` is
    not ``0``, ``false``, ``off`` or ``no``)."""
    value = os.environ.get(CHECKPOINT_GUARD_ENV, "1").strip().lower()
    return value not in ("0", "false", "off", "no")


"""The environment variable holding the path of a hook's JSON configuration."""


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
        if self.settings.save_budget is not None:
            kwargs["save_budget"] = self.settings.save_budget
        if self.stop_file is not None:
            kwargs["stop_file"] = self.stop_file
        if self.tensorboard_dir is not None:
            kwargs["export_tensorboard"] = True
            kwargs["tensorboard_dir"] = self.tensorboard_dir
        return kwargs

    def create_hook(self, cls: Callable[..., _H], **overrides: Any) -> _H:
        """A hook of class ``cls`` made from this configuration, its collections configured.

        A configured collection is included once configured: its name is the user's, never
        taken for a misspelling of a known collection (the hook warns about those)."""
        kwargs = {**self.hook_kwargs(), **overrides}
        if "save_config" in overrides and "save_budget" not in overrides:
            kwargs.pop("save_budget", None)  # a schedule given here is the caller's: kept exactly
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
