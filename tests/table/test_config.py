"""The runs' configurations in an exported dataset: ``config/run=<run>/config.parquet``,
rewritten by each export, and the ``config`` view of ``query`` joined with ``stats``."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("duckdb")

from tensortap.hook._hook import Hook
from tensortap.table import export_parquet, query
from tensortap.table._config import flatten


def _run(path: Path, lr: float, batch: int, losses: list[float]) -> None:
    with Hook(str(path)) as hook:
        hook.log_config({"learning_rate": lr, "batch_size": batch, "optimizer": {"betas": [0.9]}})
        for loss in losses:
            hook.save_scalar("loss", loss, "losses")
            hook.next_step()


def test_each_runs_configuration_is_exported_and_joins_its_rows(tmp_path: Path) -> None:
    _run(tmp_path / "fast", 0.1, 32, [2.0])
    _run(tmp_path / "slow", 0.001, 64, [2.9])
    data = tmp_path / "data"
    export_parquet([tmp_path / "fast", tmp_path / "slow"], data)
    table = query(
        "SELECT s.run, c.number AS lr, min(s.value) AS best FROM stats s JOIN config c "
        "USING (run) WHERE c.key = 'learning_rate' AND s.tensor = 'loss' "
        "GROUP BY s.run, c.number ORDER BY lr",
        data,
    ).to_pylist()
    assert table == [
        {"run": "slow", "lr": 0.001, "best": 2.9},
        {"run": "fast", "lr": 0.1, "best": 2.0},
    ]
    rows = query("SELECT key, value FROM config WHERE run = 'slow' ORDER BY key", data)
    found = dict(zip(rows["key"].to_pylist(), rows["value"].to_pylist(), strict=True))
    assert found["batch_size"] == "64" and found["optimizer.betas.0"] == "0.9"
    assert "packages.python" in found


def test_a_later_export_rewrites_the_configuration(tmp_path: Path) -> None:
    hook = Hook(str(tmp_path / "live"))
    hook.log_config({"learning_rate": 0.1})
    hook.save_scalar("loss", 1.0)
    hook.next_step()
    hook.flush()
    data = tmp_path / "data"
    export_parquet([tmp_path / "live"], data)
    hook.log_config({"learning_rate": 0.05})
    hook.close()
    export_parquet([tmp_path / "live"], data)
    table = query("SELECT number FROM config WHERE key = 'learning_rate'", data)
    assert table["number"].to_pylist() == [0.05]
    assert query("SELECT count(*) AS n FROM config WHERE run = 'nope'", data)["n"][0].as_py() == 0


def test_flatten_keeps_every_leaf() -> None:
    assert flatten({"a": {"b": [1, {"c": "x"}]}, "d": True, "e": {}, "f": None}) == [
        ("a.b.0", "1", 1.0),
        ("a.b.1.c", '"x"', None),
        ("d", "true", None),
        ("e", "{}", None),
        ("f", "null", None),
    ]
