"""The run's configuration: ``hook.log_config`` and ``gather_config`` to ``trial.config()``,
merging within and across sessions, secrets, the budget, and hostile documents."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tensortap import create_trial
from tensortap.exceptions import FormatError, InvalidConfigError
from tensortap.format import _layout as layout
from tensortap.format._run_config import MAX_CONFIG_BYTES, encode_config
from tensortap.hook._hook import Hook
from tensortap.hook._run_config import command_line, git_state, run_facts


def _hook(path: Path) -> Hook:
    return Hook(str(path))


def test_log_config_round_trips_and_merges(tmp_path: Path) -> None:
    with _hook(tmp_path) as hook:
        hook.log_config({"lr": 3e-4, "model": {"depth": 20}, "tags": ["a", "b"], "none": None})
        hook.log_config({"model": {"width": 64}, "lr": 1e-3})  # merged key by key
        hook.save_scalar("loss", 1.0)
        hook.next_step()
    config = create_trial(str(tmp_path)).config()
    assert config["lr"] == 1e-3
    assert config["model"] == {"depth": 20, "width": 64}
    assert config["tags"] == ["a", "b"] and config["none"] is None
    assert "command" in config and "python" in config["packages"]


def test_a_live_trial_reads_the_configuration_as_it_grows(tmp_path: Path) -> None:
    hook = _hook(tmp_path)
    trial = create_trial(str(tmp_path))
    hook.log_config({"lr": 0.1})
    assert trial.config()["lr"] == 0.1
    hook.log_config({"batch_size": 32})
    assert trial.config()["batch_size"] == 32
    hook.close()


def test_secrets_are_never_recorded(tmp_path: Path) -> None:
    with _hook(tmp_path) as hook:
        hook.log_config(
            {
                "hub_token": "hf_abc",
                "wandb": {"api_key": "k123", "project": "p"},
                "db_password": "pw",
                "pad_token_id": 0,
                "max_tokens": 512,
            }
        )
    config = create_trial(str(tmp_path)).config()
    raw = b"".join(p.read_bytes() for p in (tmp_path / "workers" / "worker_0" / "config").iterdir())
    for secret in (b"hf_abc", b"k123", b'"pw"'):
        assert secret not in raw
    assert config["hub_token"] == config["db_password"] == "<redacted>"
    assert config["wandb"] == {"api_key": "<redacted>", "project": "p"}
    assert (config["pad_token_id"], config["max_tokens"]) == (0, 512)  # not secrets


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"x": object()}, "not a JSON value"),
        ({"x": float("nan")}, "non-finite"),
        ({"x": np.zeros(3)}, "not a JSON value"),
        ({1: "a"}, "not a string"),
        ({"x": "a" * 10_000}, "characters"),
        ({"x": list(range(5000))}, "items"),
        ("lr=1", "mapping"),
    ],
)
def test_log_config_refuses_what_is_not_json(tmp_path: Path, values: object, says: str) -> None:
    with _hook(tmp_path) as hook:
        with pytest.raises(InvalidConfigError, match=says):
            hook.log_config(values)  # type: ignore[arg-type]
        hook.log_config({"fine": 1})  # the hook goes on
    assert create_trial(str(tmp_path)).config()["fine"] == 1


def test_log_config_refuses_what_is_over_budget(tmp_path: Path) -> None:
    with _hook(tmp_path) as hook:
        chunk = {f"k{i}": "v" * 8000 for i in range(20)}  # about 160 KB
        hook.log_config(chunk)
        with pytest.raises(InvalidConfigError, match="at most"):
            hook.log_config({"more": chunk})  # 320 KB in all
        kept = hook.run_config()
        assert "more" not in kept
    assert len(json.dumps(kept)) <= MAX_CONFIG_BYTES


def test_gather_config_converts_leniently_and_never_raises(tmp_path: Path) -> None:
    class Odd:
        def __str__(self) -> str:
            return "odd"

    def broken() -> dict[str, object]:
        raise RuntimeError("boom")

    with _hook(tmp_path) as hook:
        hook.gather_config({"betas": (0.9, 0.99), "n": np.int64(3), "x": Odd(), "nan": np.nan})
        hook.gather_config(broken)  # contained, counted as the hook's own failures are
        hook.gather_config({"huge": ["v" * 8000] * 2000})  # over budget: left out, no error
        assert hook.status.internal_errors == 1
    config = create_trial(str(tmp_path)).config()
    assert config["betas"] == [0.9, 0.99] and config["n"] == 3
    assert (config["x"], config["nan"]) == ("odd", "nan")
    assert "huge" not in config


def test_sessions_merge_in_order_and_workers_keep_their_own(tmp_path: Path) -> None:
    with _hook(tmp_path) as hook:
        hook.log_config({"lr": 0.1, "epochs": 3})
        hook.save_scalar("loss", 1.0)
        hook.next_step()
    with _hook(tmp_path) as hook:  # resumed: a second session of worker_0
        hook.log_config({"lr": 0.01})
        hook.save_scalar("loss", 1.0)
        hook.next_step()
    with Hook(str(tmp_path), worker=1, num_workers=2) as other:
        other.log_config({"lr": 5.0, "rank": 1})
    trial = create_trial(str(tmp_path))
    assert (trial.config()["lr"], trial.config()["epochs"]) == (0.01, 3)
    assert "rank" not in trial.config()  # worker_0's
    assert trial.config("worker_1")["rank"] == 1
    config_dir = tmp_path / "workers" / "worker_0" / "config"
    assert sorted(p.name for p in config_dir.iterdir()) == ["000000.json", "000001.json"]


def _write(tmp_path: Path, raw: bytes, index: int = 1) -> None:
    path = tmp_path / layout.config_key("worker_0", index)
    path.write_bytes(raw)


HOSTILE = [
    b"not json",
    b"[1, 2]",
    b'{"kind": "session"}',
    json.dumps({"kind": "config", "worker": "worker_0", "session": "s", "index": 1}).encode(),
    encode_config("worker_0", "s", 1, {"x": 1}).replace(b'"index": 1', b'"index": -1'),
    encode_config("worker_0", "s", 1, {"x": 1}).replace(b'"x": 1', b'"x": NaN'),
    encode_config("worker_0", "s", 1, {"x": 1}).replace(b'"x": 1', b'"x": 1e999'),
    encode_config("worker_0", "s", 1, {"x": 1}).replace(b'"config": {', b'"config": [{'),
    b'{"kind": "config", "config": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    encode_config("worker_0", "s", 1, {"x": "y" * (MAX_CONFIG_BYTES + 10_000)}),
    encode_config("worker_0", "s", 1, {"x": 1}).replace(
        b'"format_version": 1', b'"format_version": 99'
    ),
]


@pytest.mark.parametrize("raw", HOSTILE, ids=range(len(HOSTILE)))
def test_a_damaged_or_hostile_config_document_is_a_problem_not_a_crash(
    tmp_path: Path, raw: bytes
) -> None:
    with _hook(tmp_path) as hook:
        hook.log_config({"lr": 0.1})
    _write(tmp_path, raw)
    trial = create_trial(str(tmp_path))
    assert trial.config() == create_trial(str(tmp_path)).config()
    assert trial.config()["lr"] == 0.1  # the good session's
    assert any("config/000001.json" in p for p in trial.problems()), trial.problems()
    with pytest.raises(FormatError):
        create_trial(str(tmp_path), strict=True).config()


def test_a_secret_another_writer_kept_is_redacted_when_read(tmp_path: Path) -> None:
    with _hook(tmp_path) as hook:
        hook.log_config({"lr": 0.1})
    _write(tmp_path, encode_config("worker_0", "s", 1, {"api_key": "leaked"}))
    assert create_trial(str(tmp_path)).config()["api_key"] == "<redacted>"


def test_the_command_line_hides_secret_flags() -> None:
    argv = ["train.py", "--hub-token", "x1", "--api_key=x2", "--lr", "0.1", "-v", "--password"]
    assert command_line(argv) == [
        "train.py",
        "--hub-token",
        "<redacted>",
        "--api_key=<redacted>",
        "--lr",
        "0.1",
        "-v",
        "--password",
    ]


def test_git_state_of_a_repository_and_of_none(tmp_path: Path) -> None:
    assert git_state(str(tmp_path)) is None
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    git("init", "-q")
    (repo / "train.py").write_text("print(1)\n")
    git("add", "train.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    commit = git("rev-parse", "HEAD")
    assert git_state(str(repo)) == {"commit": commit, "dirty": False}
    (repo / "train.py").write_text("print(2)\n")
    git_state.cache_clear()
    assert git_state(str(repo)) == {"commit": commit, "dirty": True}


def test_run_facts_name_the_packages_imported() -> None:
    facts = run_facts()
    assert facts["packages"]["numpy"] == np.__version__
