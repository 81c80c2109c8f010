"""What to save of a tensor: the raw value, its shape, and/or reductions and norms."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tensortap.core._numerics import NUMERICS_REDUCTIONS
from tensortap.exceptions import InvalidConfigError

ALLOWED_REDUCTIONS = ("min", "max", "mean", "std", "variance", "sum", "prod")
ALLOWED_NORMS = ("l1", "l2")
# amax, dynamic_range, nonfinite, underflow_<format>, overflow_<format>: see core/_numerics.py
# (in ``reductions`` only: they are about magnitudes already)
NUMERICS = NUMERICS_REDUCTIONS


def _names(field_name: str, value: object, allowed: tuple[str, ...]) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    if not isinstance(value, Iterable):
        raise InvalidConfigError(f"{field_name} must be a list of names, got {value!r}")
    out: list[str] = []
    for item in value:
        name = item.strip().lower() if isinstance(item, str) else item
        if name not in allowed:
            raise InvalidConfigError(
                f"unknown name {item!r} in {field_name}; accepted: {', '.join(allowed)}"
            )
        if name not in out:
            out.append(name)
    return tuple(out)


@dataclass(frozen=True)
class ReductionConfig:
    """Reductions (min, max, mean, std, variance, sum, prod) and norms (l1, l2) to save, and
    numerics statistics for low precision among the reductions (amax, dynamic_range,
    nonfinite, underflow_bf16/fp16/fp8_e4m3/fp8_e5m2, overflow_fp16/fp8_e4m3/fp8_e5m2).

    ``abs_reductions`` and ``abs_norms`` apply to the absolute value of the tensor. The raw
    tensor is saved when ``save_raw_tensor`` is true *or* when no reduction, norm or shape is
    asked for; any combination of the three may be saved together.
    """

    reductions: tuple[str, ...] = ()
    abs_reductions: tuple[str, ...] = ()
    norms: tuple[str, ...] = ()
    abs_norms: tuple[str, ...] = ()
    save_raw_tensor: bool = False
    save_shape: bool = False

    if TYPE_CHECKING:  # the constructor takes any iterable of names (smdebug's lists) or "a,b"

        def __init__(
            self,
            reductions: Iterable[str] = (),
            abs_reductions: Iterable[str] = (),
            norms: Iterable[str] = (),
            abs_norms: Iterable[str] = (),
            save_raw_tensor: bool = False,
            save_shape: bool = False,
        ) -> None: ...

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "reductions",
            _names("reductions", self.reductions, ALLOWED_REDUCTIONS + NUMERICS),
        )
        object.__setattr__(
            self,
            "abs_reductions",
            _names("abs_reductions", self.abs_reductions, ALLOWED_REDUCTIONS),
        )
        object.__setattr__(self, "norms", _names("norms", self.norms, ALLOWED_NORMS))
        object.__setattr__(self, "abs_norms", _names("abs_norms", self.abs_norms, ALLOWED_NORMS))
        for flag in ("save_raw_tensor", "save_shape"):
            if not isinstance(getattr(self, flag), bool):
                raise InvalidConfigError(
                    f"{flag} must be True or False, got {getattr(self, flag)!r}"
                )

    @property
    def reduction_specs(self) -> tuple[tuple[str, bool], ...]:
        """Every (name, on_absolute_value) pair to compute."""
        return tuple((n, False) for n in self.reductions + self.norms) + tuple(
            (n, True) for n in self.abs_reductions + self.abs_norms
        )

    @property
    def saves_raw(self) -> bool:
        """The raw tensor is saved if asked for, or if nothing else is."""
        return self.save_raw_tensor or not (self.reduction_specs or self.save_shape)

    def to_dict(self) -> dict[str, Any]:
        return {
            "reductions": list(self.reductions),
            "abs_reductions": list(self.abs_reductions),
            "norms": list(self.norms),
            "abs_norms": list(self.abs_norms),
            "save_raw_tensor": self.save_raw_tensor,
            "save_shape": self.save_shape,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReductionConfig:
        allowed = set(cls.__dataclass_fields__)
        unknown = set(data) - allowed
        if unknown:
            raise InvalidConfigError(
                f"unknown reduction config keys {sorted(unknown)}; accepted: {sorted(allowed)}"
            )
        kwargs = dict(data)
        for flag in ("save_raw_tensor", "save_shape"):
            if isinstance(kwargs.get(flag), str):
                kwargs[flag] = {"true": True, "false": False}.get(
                    kwargs[flag].strip().lower(), kwargs[flag]
                )
        return cls(**kwargs)
