"""Hook configuration from JSON (zero-code-change runs and the job runner)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensortap as tt
from tensortap.exceptions import InvalidConfigError
from tensortap.hook._config import CONFIG_ENV, CollectionSettings, HookConfig


def test_our_spelling_and_smdebugs_give_the_same_config(tmp_path: Path) -> None:
    ours = {
        "out_dir": "runs/a",
        "hook_parameters": {"save_interval": "10", "eval.save_interval": "2", "norms": "l2"},
        "collection_configurations": [
            {"name": "weights"},
            {"name": "custom", "parameters": {"include_regex": "fc1.*", "save_steps": "1,2,3"}},
        ],
    }
    smdebug = {
        "LocalPath": "runs/a",
        "HookParameters": ours["hook_parameters"],
        "CollectionConfigurations": [
            {"CollectionName": "weights"},
            {
                "CollectionName": "custom",
                "CollectionParameters": {"include_regex": "fc1.*", "save_steps": "1,2,3"},
            },
        ],
    }
    a, b = HookConfig.from_dict(ours), HookConfig.from_dict(smdebug)
    assert a == b
    assert a.include_collections == ("weights", "custom")
    save = a.save_config
    assert save is not None and save.should_save(tt.modes.TRAIN, 20)
    assert not save.should_save(tt.modes.TRAIN, 2) and save.should_save(tt.modes.EVAL, 2)
    assert a.reduction_config == tt.ReductionConfig(norms=["l2"])
    manager = tt.CollectionManager()
    a.configure(manager)
    custom = manager.get("custom")
    assert custom.include_regex == ["fc1.*"]
    assert custom.save_config is not None and custom.save_config.save_steps == (1, 2, 3)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "no out_dir"),
        ({"out_dir": "x", "extra": 1}, "unknown keys"),
        ({"out_dir": "x", "hook_parameters": {"save_intervall": "1"}}, "save_intervall"),
        ({"out_dir": "x", "hook_parameters": {"save_interval": "ten"}}, "save_interval"),
        ({"out_dir": "x", "hook_parameters": {"train.norms": "l2"}}, "per-mode"),
        ({"out_dir": "x", "hook_parameters": {"reductions": "median"}}, "median"),
        (
            {"out_dir": "x", "collection_configurations": [{"name": "w", "parameters": {"x": 1}}]},
            "collection 'w'",
        ),
        (
            {
                "out_dir": "x",
                "collection_configurations": [{"name": "w", "parameters": {"include_regex": "("}}],
            },
            "include_regex",
        ),
    ],
)
def test_mistakes_are_caught_when_the_config_is_read(data, message) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        HookConfig.from_dict(data)


def test_from_json_file_and_the_environment(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "hook.json"
    path.write_text(json.dumps({"out_dir": str(tmp_path / "run")}))
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    with pytest.raises(InvalidConfigError, match=CONFIG_ENV):
        HookConfig.from_json_file()
    monkeypatch.setenv(CONFIG_ENV, str(path))
    assert HookConfig.from_json_file().out_dir == str(tmp_path / "run")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidConfigError, match="not valid JSON"):
        HookConfig.from_json_file(bad)
    with pytest.raises(InvalidConfigError, match="cannot read"):
        HookConfig.from_json_file(tmp_path / "missing.json")


names = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)
params = st.fixed_dictionaries(
    {},
    optional={
        "save_interval": st.integers(1, 1000).map(str),
        "save_steps": st.lists(st.integers(0, 100), max_size=4).map(
            lambda v: ",".join(map(str, v))
        ),
        "eval.save_interval": st.integers(1, 50),
        "reductions": st.sampled_from(["min", "max,mean", "std"]),
        "save_raw_tensor": st.sampled_from(["true", "false", True]),
        "include_regex": st.sampled_from(["fc.*", "conv[0-9]+"]),
    },
)


@given(
    hook_params=params,
    colls=st.lists(st.tuples(names, params), max_size=3, unique_by=lambda c: c[0]),
    board=st.sampled_from([None, "runs/board"]),
)
def test_configs_round_trip_through_json(hook_params, colls, board) -> None:
    config = HookConfig(
        "runs/x",
        hook_params,
        tuple(CollectionSettings(n, p) for n, p in colls),
        tensorboard_dir=board,
    )
    again = HookConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config
    assert again.save_config == config.save_config
    assert again.reduction_config == config.reduction_config


def test_tensorboard_dir_turns_tensorboard_output_on() -> None:
    kwargs = HookConfig("runs/x", tensorboard_dir="runs/board").hook_kwargs()
    assert kwargs["export_tensorboard"] is True and kwargs["tensorboard_dir"] == "runs/board"
    assert "export_tensorboard" not in HookConfig("runs/x").hook_kwargs()
    with pytest.raises(InvalidConfigError, match="tensorboard_dir must be a path string"):
        HookConfig("runs/x", tensorboard_dir="")


def test_parameters_are_parsed_once_when_the_config_is_made(monkeypatch, tmp_path: Path) -> None:
    from tensortap.core._save_config import SaveConfigMode

    parse = SaveConfigMode.from_dict.__func__  # type: ignore[attr-defined]
    calls: list[object] = []

    def counted(cls, data):
        calls.append(data)
        return parse(cls, data)

    monkeypatch.setattr(SaveConfigMode, "from_dict", classmethod(counted))
    config = HookConfig.from_dict(
        {
            "out_dir": str(tmp_path / "run"),
            "hook_parameters": {"save_interval": "3"},
            "collection_configurations": [{"name": "mine", "parameters": {"save_steps": "1"}}],
        }
    )
    made = len(calls)
    assert made == 2  # the hook's schedule and the collection's
    assert config.save_config == config.save_config == tt.SaveConfig(save_interval=3)
    assert config.hook_kwargs()["save_config"] is config.save_config  # typed values, shared
    with config.create_hook(tt.Hook) as hook:
        assert hook.get_collection("mine").save_config is config.collections[0].save_config
    assert len(calls) == made


def test_writer_options_come_from_json_and_reach_the_hook(tmp_path: Path) -> None:
    data = {
        "out_dir": str(tmp_path / "run"),
        "writer_options": {"flush_secs": 7, "when_full": "drop"},
    }
    config = HookConfig.from_dict(data)
    assert config.writer_options == tt.WriterOptions(flush_secs=7, when_full="drop")
    assert HookConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert "writer_options" not in HookConfig(str(tmp_path)).to_dict()  # the format stays
    with config.create_hook(tt.Hook) as hook:
        assert hook._writer.options == config.writer_options
    for bad, message in [
        ({"flush": 1}, r"writer_options: unknown writer options \['flush'\]; accepted: flush_secs"),
        ({"flush_secs": -1}, "writer_options: flush_secs must be a number > 0, got -1"),
        ({"when_full": "wait"}, "when_full must be 'block' or 'drop'"),
        ("fast", "writer options must be an object"),
    ]:
        with pytest.raises(InvalidConfigError, match=message):
            HookConfig.from_dict({**data, "writer_options": bad})


def test_a_process_reads_its_config_file_once(tmp_path: Path, monkeypatch) -> None:
    from tensortap.hook._config import read_config

    path = tmp_path / "hook.json"
    path.write_text(json.dumps({"out_dir": str(tmp_path / "a")}))
    monkeypatch.setenv(CONFIG_ENV, str(path))
    first = read_config()
    assert read_config(path) is first and read_config(str(path)) is first
    path.write_text(json.dumps({"out_dir": str(tmp_path / "bb")}))  # changed: read again
    assert read_config().out_dir == str(tmp_path / "bb")
    with pytest.raises(InvalidConfigError, match="cannot read"):
        read_config(tmp_path / "missing.json")


def test_a_hook_a_job_script_makes_takes_the_jobs_writer_options(
    tmp_path: Path, monkeypatch
) -> None:
    from tensortap.hook._config import JOB_ENV

    trial = tmp_path / "job" / "trial"
    config = HookConfig(str(trial), writer_options=tt.WriterOptions(flush_secs=9))
    path = tmp_path / "hook.json"
    path.write_text(json.dumps(config.to_dict()))
    monkeypatch.setenv(CONFIG_ENV, str(path))
    monkeypatch.setenv(JOB_ENV, str(tmp_path / "job"))
    with tt.Hook(tmp_path / "elsewhere") as hook:  # redirected to the job's trial
        assert hook.out_dir == str(trial) and hook._writer.options.flush_secs == 9
    mine = tt.WriterOptions(flush_secs=2)
    with tt.Hook(tmp_path / "elsewhere", writer_options=mine) as hook:  # the script's own win
        assert hook._writer.options is mine
    monkeypatch.delenv(JOB_ENV)
    with tt.Hook(tmp_path / "plain") as hook:  # not in a job: the defaults
        assert hook._writer.options == tt.WriterOptions()
