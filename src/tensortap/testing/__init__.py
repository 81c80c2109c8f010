"""Helpers for testing code that reads trials (rules, reports): build real trials from NumPy;
for testing a storage backend: the Store conformance suite (``check_store``, or its
``CHECKS`` one by one); and
for testing attribution by replay: a bit-flip fault injector (:mod:`.bitflip`, which imports
torch and loads at first use)."""

from typing import Any

from tensortap.testing._fake_trial import TrialBuilder, infer_collections
from tensortap.testing._store_conformance import CHECKS, check_store

__all__ = [
    "CHECKS",
    "BitFlip",
    "TrialBuilder",
    "check_store",
    "flip_bit",
    "infer_collections",
    "inject_bitflip",
]

_TORCH_NAMES = ("BitFlip", "flip_bit", "inject_bitflip")


def __getattr__(name: str) -> Any:
    if name in _TORCH_NAMES:
        from tensortap.testing import _bitflip as bitflip

        return getattr(bitflip, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
