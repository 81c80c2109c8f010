from __future__ import annotations

import pytest

from tensortap import Collection, CollectionManager, ReductionConfig, SaveConfig
from tensortap.core.collections import BUILTIN_COLLECTIONS
from tensortap.exceptions import InvalidConfigError


def test_include_exclude_and_explicit_names() -> None:
    coll = Collection("relu", include_regex=r"relu", exclude_regex=[r"input"])
    assert coll.matches("layer1/relu_output")
    assert not coll.matches("layer1/relu_input")
    assert not coll.matches("layer1/tanh")
    coll.add_tensor_name("layer1/relu_input")  # explicit names are never excluded
    assert coll.matches("layer1/relu_input")


def test_invalid_regex_fails_at_construction() -> None:
    with pytest.raises(InvalidConfigError, match=r"invalid include_regex '\(unclosed'"):
        Collection("c", include_regex="(unclosed")
    with pytest.raises(InvalidConfigError, match="exclude_regex"):
        Collection("c", exclude_regex="[")
    with pytest.raises(InvalidConfigError, match="collection name"):
        Collection("")


def test_dict_round_trip() -> None:
    coll = Collection(
        "g",
        include_regex=["grad"],
        exclude_regex=["bias"],
        tensor_names=["x"],
        save_config=SaveConfig(save_interval=3),
        reduction_config=ReductionConfig(norms=["l2"]),
    )
    back = Collection.from_dict(coll.to_dict())
    assert back.to_dict() == coll.to_dict()


def test_manager_is_per_instance_with_builtins() -> None:
    a, b = CollectionManager(), CollectionManager()
    assert set(BUILTIN_COLLECTIONS) <= set(a.names())
    a.get("custom").include("x")
    assert "custom" not in b
    assert a.get("all").matches("anything")
    version = a.version
    a.get("weights").add_tensor_name("w")
    assert a.version > version
    assert CollectionManager.from_dict(a.to_dict()).to_dict() == a.to_dict()
