from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensortap import SaveConfig, SaveConfigMode, modes
from tensortap.exceptions import InvalidConfigError, TensortapError


def reference(
    step: int, interval: int | None, start: int, end: int | None, steps: list[int]
) -> bool:
    """The rule, written plainly."""
    if step in steps:
        return True
    if interval is None:
        interval = None if steps else 500
    if interval is None:
        return False
    in_range = start <= step and (end is None or step < end)
    return in_range and step % interval == 0


configs = st.builds(
    lambda interval, start, length, steps: (
        interval,
        start,
        None if length is None else start + length,
        steps,
    ),
    st.one_of(st.none(), st.integers(1, 50)),
    st.integers(0, 100),
    st.one_of(st.none(), st.integers(1, 200)),
    st.lists(st.integers(0, 400), max_size=6),
)


@given(configs, st.lists(st.integers(0, 400), min_size=1, max_size=30))
def test_should_save_matches_reference(cfg, steps_to_check) -> None:
    interval, start, end, save_steps = cfg
    mode_cfg = SaveConfigMode(interval, start, end, save_steps)
    for step in steps_to_check:
        assert mode_cfg.should_save(step) == reference(step, interval, start, end, save_steps)


@given(configs)
def test_dict_round_trip(cfg) -> None:
    interval, start, end, save_steps = cfg
    config = SaveConfig(interval, start, end, save_steps)
    assert SaveConfig.from_dict(config.to_dict()) == config
    mode_cfg = SaveConfigMode(interval, start, end, save_steps)
    assert SaveConfigMode.from_dict(mode_cfg.to_dict()) == mode_cfg


def test_defaults_and_save_steps_only() -> None:
    assert SaveConfig().should_save(modes.TRAIN, 0)
    assert SaveConfig().should_save(modes.TRAIN, 500)
    assert not SaveConfig().should_save(modes.TRAIN, 499)
    only = SaveConfig(save_steps=[1, 2, 3])
    assert [s for s in range(1001) if only.should_save(modes.TRAIN, s)] == [1, 2, 3]
    both = SaveConfig(save_interval=10, save_steps=[3])
    assert [s for s in range(25) if both.should_save(modes.EVAL, s)] == [0, 3, 10, 20]


def test_per_mode_configs() -> None:
    cfg = SaveConfig(
        save_interval=7,
        mode_save_configs={
            modes.TRAIN: SaveConfigMode(save_interval=2),
            "EVAL": {"save_steps": [5]},  # type: ignore[dict-item]
        },
    )
    assert cfg.should_save(modes.TRAIN, 4) and not cfg.should_save(modes.TRAIN, 7)
    assert cfg.should_save(modes.EVAL, 5) and not cfg.should_save(modes.EVAL, 0)
    assert cfg.should_save(modes.PREDICT, 7)
    assert SaveConfig.from_dict(cfg.to_dict()) == cfg


def test_json_string_forms() -> None:
    cfg = SaveConfigMode.from_dict({"save_steps": "1, 2, 3", "save_interval": "10"})
    assert cfg.save_steps == (1, 2, 3) and cfg.save_interval == 10


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"save_interval": 0}, "save_interval"),
        ({"save_interval": -5}, "save_interval"),
        ({"save_interval": 2.5}, "save_interval"),
        ({"save_interval": True}, "save_interval"),
        ({"start_step": -1}, "start_step"),
        (
            {"start_step": 10, "end_step": 5},
            r"end_step \(5\) must be greater than start_step \(10\)",
        ),
        ({"start_step": 5, "end_step": 5}, "greater than"),
        ({"save_steps": [1, -2]}, "save_steps"),
        ({"save_steps": "3"}, "save_steps"),
    ],
)
def test_bad_save_configs_fail_at_construction(kwargs, fragment) -> None:
    with pytest.raises(InvalidConfigError, match=fragment) as info:
        SaveConfigMode(**kwargs)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TensortapError)
    with pytest.raises(InvalidConfigError):
        SaveConfig(**kwargs)


def test_unknown_mode_and_keys() -> None:
    with pytest.raises(InvalidConfigError, match="unknown mode 'TRAINING'"):
        SaveConfig(mode_save_configs={"TRAINING": SaveConfigMode()})  # type: ignore[dict-item]
    with pytest.raises(InvalidConfigError, match="unknown save config keys"):
        SaveConfigMode.from_dict({"every": 3})
    with pytest.raises(InvalidConfigError, match="save_interval must be an integer"):
        SaveConfigMode.from_dict({"save_interval": "ten"})
