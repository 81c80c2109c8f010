"""Which steps to save: :class:`SaveConfigMode` (a schedule), :class:`SaveConfig` (one per mode).

A schedule is a predicate: ``should_save(step)`` on the step number *within the mode*.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from tensortap.core._modes import ALL_MODES, ModeKeys, parse_mode
from tensortap.exceptions import InvalidConfigError

DEFAULT_SAVE_INTERVAL = 500


def _as_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidConfigError(f"{name} must be an int >= {minimum}, got {value!r}")
    if value < minimum:
        raise InvalidConfigError(f"{name} must be an int >= {minimum}, got {value}")
    return value


def _parse_int_text(name: str, value: object) -> object:
    """Accept the string forms JSON configs use ("10"); leave other values to validation."""
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise InvalidConfigError(f"{name} must be an integer, got {value!r}") from None
    return value


@dataclass(frozen=True)
class SaveConfigMode:
    """One save schedule.

    A step is saved if it is in ``save_steps``, or if ``start_step <= step < end_step`` and
    ``step % save_interval == 0``. When ``save_steps`` is given and ``save_interval`` is not, only
    ``save_steps`` are saved (smdebug also saved every 500th step then, which surprised users);
    with neither given the interval is 500.
    """

    save_interval: int | None = None
    start_step: int = 0
    end_step: int | None = None
    save_steps: tuple[int, ...] = ()

    if TYPE_CHECKING:  # the constructor takes any iterable of steps (smdebug's lists); kept sorted

        def __init__(
            self,
            save_interval: int | None = None,
            start_step: int = 0,
            end_step: int | None = None,
            save_steps: Iterable[int] = (),
        ) -> None: ...

    def __post_init__(self) -> None:
        steps: Any = self.save_steps
        if isinstance(steps, (str, bytes)) or not isinstance(steps, Iterable):
            raise InvalidConfigError(
                f"save_steps must be a list of ints >= 0, got {steps!r} (to save every N steps, "
                "use save_interval)"
            )
        steps = tuple(sorted({_as_int("each of save_steps", s, 0) for s in steps}))
        object.__setattr__(self, "save_steps", steps)
        if self.save_interval is None:
            interval = None if steps else DEFAULT_SAVE_INTERVAL
        else:
            interval = _as_int("save_interval", self.save_interval, 1)
        object.__setattr__(self, "save_interval", interval)
        _as_int("start_step", self.start_step, 0)
        if self.end_step is not None:
            _as_int("end_step", self.end_step, 0)
            if self.end_step <= self.start_step:
                raise InvalidConfigError(
                    f"end_step ({self.end_step}) must be greater than start_step "
                    f"({self.start_step}): steps in [start_step, end_step) are saved"
                )
        object.__setattr__(self, "_save_step_set", frozenset(steps))

    def should_save(self, step: int) -> bool:
        """True when the step (numbered within its mode) is due."""
        if step in self._save_step_set:  # type: ignore[attr-defined]
            return True
        interval = self.save_interval
        if interval is None or step < self.start_step:
            return False
        if self.end_step is not None and step >= self.end_step:
            return False
        return step % interval == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "save_interval": self.save_interval,
            "start_step": self.start_step,
            "end_step": self.end_step,
            "save_steps": list(self.save_steps),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SaveConfigMode:
        """Build from a dict; accepts the string forms of JSON configs ("10", "1, 2, 3")."""
        allowed = {"save_interval", "start_step", "end_step", "save_steps"}
        unknown = set(data) - allowed
        if unknown:
            raise InvalidConfigError(
                f"unknown save config keys {sorted(unknown)}; accepted: {sorted(allowed)}"
            )
        steps: Any = data.get("save_steps") or ()
        if isinstance(steps, str):
            steps = [_parse_int_text("save_steps", s) for s in steps.split(",") if s.strip()]
        if isinstance(steps, str | bytes) or not isinstance(steps, Iterable):
            raise InvalidConfigError(
                f"save_steps must be a list of steps such as [0, 10, 50], got {steps!r} "
                "(to save every N steps, use save_interval)"
            )
        return cls(
            save_interval=_parse_int_text("save_interval", data.get("save_interval")),  # type: ignore[arg-type]
            start_step=_parse_int_text("start_step", data.get("start_step") or 0),  # type: ignore[arg-type]
            end_step=_parse_int_text("end_step", data.get("end_step")),  # type: ignore[arg-type]
            save_steps=tuple(steps),
        )


@dataclass(frozen=True, eq=False)
class SaveConfig:
    """A save schedule per mode.

    ``SaveConfig(save_interval=10)`` uses one schedule for every mode;
    ``SaveConfig(mode_save_configs={modes.TRAIN: SaveConfigMode(...)})`` sets modes one by one, and
    modes left out use the schedule given by the other arguments.
    """

    save_interval: int | None = None
    start_step: int = 0
    end_step: int | None = None
    save_steps: tuple[int, ...] = ()
    mode_save_configs: Mapping[ModeKeys, SaveConfigMode] = field(default_factory=dict)

    if TYPE_CHECKING:  # the constructor takes any iterable of steps (smdebug's lists)

        def __init__(
            self,
            save_interval: int | None = None,
            start_step: int = 0,
            end_step: int | None = None,
            save_steps: Iterable[int] = (),
            mode_save_configs: Mapping[ModeKeys, SaveConfigMode] = ...,
        ) -> None: ...

    def __post_init__(self) -> None:
        base = SaveConfigMode(self.save_interval, self.start_step, self.end_step, self.save_steps)
        object.__setattr__(self, "save_interval", base.save_interval)
        object.__setattr__(self, "save_steps", base.save_steps)
        given = self.mode_save_configs
        if not isinstance(given, Mapping):
            raise InvalidConfigError(
                f"mode_save_configs must be a dict of mode -> SaveConfigMode, got {given!r}"
            )
        per_mode: dict[ModeKeys, SaveConfigMode] = {mode: base for mode in ALL_MODES}
        for key, value in given.items():
            mode = parse_mode(key)
            if isinstance(value, Mapping):
                value = SaveConfigMode.from_dict(value)
            if not isinstance(value, SaveConfigMode):
                raise InvalidConfigError(
                    f"mode_save_configs[{mode.name}] must be a SaveConfigMode, got {value!r}"
                )
            per_mode[mode] = value
        object.__setattr__(self, "mode_save_configs", MappingProxyType(per_mode))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SaveConfig):
            return NotImplemented
        return dict(self.mode_save_configs) == dict(other.mode_save_configs)

    def __hash__(self) -> int:
        return hash(tuple(self.mode_save_configs.items()))

    def get_save_config(self, mode: ModeKeys) -> SaveConfigMode:
        return self.mode_save_configs[mode]

    def should_save(self, mode: ModeKeys, mode_step: int) -> bool:
        """True when step ``mode_step`` of ``mode`` is due."""
        return self.mode_save_configs[mode].should_save(mode_step)

    def to_dict(self) -> dict[str, Any]:
        return {mode.name: cfg.to_dict() for mode, cfg in self.mode_save_configs.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SaveConfig:
        """Accept either ``{"TRAIN": {...}, ...}`` or flat ``{"save_interval": ...}``."""
        if data and all(isinstance(v, Mapping) or v is None for v in data.values()):
            modes = {
                parse_mode(k): SaveConfigMode.from_dict(v) for k, v in data.items() if v is not None
            }
            return cls(mode_save_configs=modes)
        flat = SaveConfigMode.from_dict(data)
        return cls(flat.save_interval, flat.start_step, flat.end_step, flat.save_steps)
