from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "tensortap",
    deadline=None,
    max_examples=60,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile("tensortap")

HELPERS = Path(__file__).parent / "helpers"


@pytest.fixture
def trial_dir(tmp_path: Path) -> Path:
    return tmp_path / "trial"


@pytest.fixture
def helper_env() -> dict[str, str]:
    """Environment for helper subprocesses: same interpreter, unbuffered output."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def helper_cmd(name: str, *args: object) -> list[str]:
    return [sys.executable, str(HELPERS / name), *map(str, args)]
