"""Names are data, never paths; nothing is unpickled."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.exceptions import InvalidConfigError, StorageError
from tensortap.storage import LocalStore

EVIL = ["../../etc/x", "/etc/passwd", "..\\..\\x", "a/../../b", "~/.ssh/id", "\0nul", "C:\\x"]


def test_tensor_and_collection_names_write_nothing_outside(tmp_path: Path) -> None:
    out = tmp_path / "inside" / "trial"
    with tt.Hook(out, save_config=tt.SaveConfig(save_interval=1), include_collections=EVIL) as hook:
        for name in EVIL:
            hook.save_tensor(name, np.ones(2), collections=[name])
        hook.next_step()
    outside = [p for p in tmp_path.rglob("*") if not str(p).startswith(str(out))]
    assert outside == [tmp_path / "inside"]
    trial = tt.create_trial(out)
    assert sorted(trial.tensor_names()) == sorted(EVIL)
    for name in EVIL:
        assert trial.tensor(name).value(0).tolist() == [1.0, 1.0]
        assert name in trial.collection(name).tensor_names


@pytest.mark.parametrize("worker", ["../w", "a/b", "..", ".hidden", "", "x" * 200])
def test_worker_names_are_validated(tmp_path: Path, worker: str) -> None:
    with pytest.raises(InvalidConfigError, match="invalid worker name"):
        tt.Hook(tmp_path / "t", worker=worker)


@pytest.mark.parametrize("key", ["../x", "/abs", "a//b", "a/./b", "a/../b", "", "a\\b"])
def test_store_keys_cannot_escape(tmp_path: Path, key: str) -> None:
    store = LocalStore(tmp_path / "root")
    with pytest.raises(StorageError, match="invalid storage key"):
        store.put(key, b"x")


#: The one pickle the library loads (the README states it): a rollback checkpoint's DCP
#: ``.metadata``, unpickled only from bytes whose SHA-256 matches the one this process recorded
#: when it saved them (issue 45; tests/pytorch/test_checkpoint_safety.py plants one that never
#: runs).
UNPICKLES = {Path("pytorch") / "_checkpoints.py": 1}


def test_library_never_unpickles() -> None:
    src = Path(__file__).parents[2] / "src" / "tensortap"
    for path in src.rglob("*.py"):
        text = path.read_text()
        for banned in ("allow_pickle=True", "eval(", "exec(", "np.load("):
            assert banned not in text, f"{banned} in {path}"
        allowed = UNPICKLES.get(path.relative_to(src), 0)
        assert text.count("import pickle") <= min(allowed, 1), f"import pickle in {path}"
        assert text.count("pickle.load") == allowed, f"pickle.load in {path}"
    checkpoints = (src / "pytorch" / "_checkpoints.py").read_text()
    before = checkpoints[: checkpoints.index("pickle.loads(raw)")]
    assert "_sha256(raw) != expected.sha256" in before[-400:]  # the digest checked just before
    readme = (src.parents[1] / "README.md").read_text()
    assert "The one exception is a rollback checkpoint's `.metadata`" in readme
