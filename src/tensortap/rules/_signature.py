"""How a rule class takes its parameters: read from its ``__init__``'s annotations (see
:mod:`tensortap.rules._params`), coerced and checked when the rule is built, or checked by the
class alone when a configuration names it."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tensortap.exceptions import InvalidConfigError
from tensortap.rules._params import RESERVED, ParamSpec, coerce, specs_of

if TYPE_CHECKING:
    from tensortap.rules._rule import Rule


def check_parameters(cls: type[Rule], params: Mapping[str, Any]) -> dict[str, Any]:
    """:meth:`Rule.check_parameters`."""
    specs = {s.name: s for s in cls._param_specs}
    takes_any = any(
        p.kind is p.VAR_KEYWORD for p in inspect.signature(cls.__init__).parameters.values()
    )
    unknown = [k for k in params if k not in specs and k not in RESERVED]
    if unknown and not takes_any:
        raise InvalidConfigError(
            f"rule {cls.__name__} has no parameter {unknown[0]!r} (given "
            f"{params[unknown[0]]!r}); its parameters are: {_param_list(tuple(specs.values()))}"
        )
    missing = [s.name for s in specs.values() if s.required and s.name not in params]
    if missing:
        raise InvalidConfigError(
            f"rule {cls.__name__} needs the parameter {missing[0]!r}; its parameters are: "
            f"{_param_list(tuple(specs.values()))}"
        )
    values = {
        name: coerce(cls.__name__, spec, params[name]) if name in params else spec.default
        for name, spec in specs.items()
    }
    try:
        cls.check_values(_Values(values))
    except _NotItsParameter:  # inherited checks of other parameters: they run at __init__
        pass
    return values


def parse_init(cls: type[Rule], root: type[Rule]) -> None:
    """Give ``cls`` the parameters of its own ``__init__`` (a class that defines none keeps
    its parent's), and wrap that ``__init__`` to read them (strings, values) and check them."""
    init = cls.__dict__.get("__init__")
    if init is None:
        init = cls.__init__
        if getattr(init, "_tensortap_parsed", False):
            return  # inherits its parent's parsed __init__ and parameters
    specs = tuple(specs_of(init, cls))
    cls._param_specs = specs
    by_name = {s.name: s for s in specs}
    signature = inspect.signature(init)
    takes_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())

    @functools.wraps(init)
    def parsed_init(self: Rule, *args: Any, **kw: Any) -> None:
        rule = type(self).__name__
        try:
            bound = signature.bind(self, *args, **kw)
        except TypeError as exc:
            unknown = [k for k in kw if k not in signature.parameters] if not takes_any else []
            if unknown:
                raise InvalidConfigError(
                    f"rule {rule} has no parameter {unknown[0]!r} (given {kw[unknown[0]]!r});"
                    f" its parameters are: {_param_list(specs)}"
                ) from None
            raise InvalidConfigError(
                f"rule {rule}: {exc}; its parameters are: {_param_list(specs)}"
            ) from None
        for name, value in list(bound.arguments.items()):
            spec = by_name.get(name)
            if spec is not None:
                bound.arguments[name] = coerce(rule, spec, value)
        # the checks written for this __init__'s parameters: those of the class built through
        # it, when declared on the class that defines it or below (a subclass's own __init__
        # with other parameters reaches here through super() and is checked by its parent's)
        built = next(
            k for k in type(self).__mro__ if issubclass(k, root) and k.__init__ is parsed_init
        )
        declared = next(k for k in built.__mro__ if "check_values" in k.__dict__)
        if issubclass(declared, cls):
            given = bound.arguments
            # the same checks through the class being built name it in their messages
            same = _function(type(self).check_values) is _function(built.check_values)
            (type(self) if same else built).check_values(
                {s.name: given.get(s.name, s.default) for s in specs}
            )
        init(*bound.args, **bound.kwargs)

    parsed_init._tensortap_parsed = True  # type: ignore[attr-defined]
    cls.__init__ = parsed_init  # type: ignore[method-assign]


def _function(method: Any) -> Any:
    return getattr(method, "__func__", method)


class _NotItsParameter(KeyError):
    pass


class _Values(dict[str, Any]):
    """A rule's parameters for :meth:`Rule.check_values`; a name the rule does not have says
    the checks were written for another class's parameters."""

    def __missing__(self, key: str) -> Any:
        raise _NotItsParameter(key)


def _param_list(specs: Sequence[ParamSpec]) -> str:
    if not specs:
        return "none"
    parts = []
    for s in specs:
        default = "required" if s.required else f"default {s.default!r}"
        parts.append(f"{s.name} ({s.type_text()}, {default})")
    return "; ".join(parts)
