"""How the command line spells rules, custom rules and collections (``name:k=v,...``)."""

from __future__ import annotations

from tensortap.exceptions import InvalidConfigError
from tensortap.jobs import CollectionConfig, Rule
from tensortap.rules import rule_configs
from tensortap.rules._registry import REGISTRY, config_name, find_rule, unknown_rule


def parse_params(text: str, what: str) -> dict[str, str]:
    """``k=v,k2=v2``; a piece without ``=`` continues the previous value (``save_steps=1,2,3``)."""
    params: dict[str, str] = {}
    last: str | None = None
    for piece in text.split(","):
        if "=" in piece:
            key, _, value = piece.partition("=")
            key = key.strip()
            if not key:
                raise InvalidConfigError(f"{what}: empty parameter name in {text!r}")
            params[key] = value
            last = key
        elif last is not None:
            params[last] += "," + piece
        elif piece.strip():
            raise InvalidConfigError(f"{what}: expected name=value pairs, got {text!r}")
    return params


def builtin_rule(text: str) -> Rule:
    """``vanishing_gradient`` or ``VanishingGradient``, optionally ``:k=v,...``: a built-in
    rule, or one registered with ``tensortap.rules.register_rule``."""
    name, _, params = text.partition(":")
    cls = find_rule(name)  # a configuration or class name; installed rules loaded if unknown
    if cls is None:
        names = [config_name(c) for c in REGISTRY.values()]
        raise InvalidConfigError(f"--rule: {unknown_rule(name, names)}")
    config = rule_configs.config_for(cls.__name__)
    return Rule.builtin(config, rule_parameters=parse_params(params, f"--rule {name}"))


def custom_rule(text: str) -> Rule:
    """``path.py:ClassName[:k=v,...]``."""
    parts = text.split(":", 2)
    if len(parts) < 2 or not parts[0].endswith(".py"):
        raise InvalidConfigError(
            f"--custom-rule takes path.py:ClassName[:name=value,...], got {text!r}"
        )
    params = parse_params(parts[2], f"--custom-rule {parts[1]}") if len(parts) == 3 else {}
    return Rule.custom(parts[1], parts[0], rule_parameters=params)


def collection(text: str) -> CollectionConfig:
    name, _, params = text.partition(":")
    return CollectionConfig(name, parse_params(params, f"--collection {name}"))


__all__ = ["builtin_rule", "collection", "custom_rule", "parse_params"]
