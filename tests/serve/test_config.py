"""The run's configuration on the dashboard: the runs list carries each run's learning rate
and batch size (the page sorts by them), the run's page all of it; a damaged configuration
document is one of the run's damaged parts, not an error."""

from __future__ import annotations

from pathlib import Path

import pytest

import tensortap as tt
from tests.helpers.json_get import get_json as get

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


def _trial(path: Path, config: dict[str, object]) -> None:
    with tt.Hook(str(path)) as hook:
        hook.log_config(config)
        hook.save_scalar("loss", 1.0, "losses")
        hook.next_step()


def test_the_runs_list_and_the_run_page_show_the_configuration(tmp_path: Path, serve) -> None:
    _trial(
        tmp_path / "runs" / "a",
        {"learning_rate": 0.1, "batch_size": 32, "optimizer": {"betas": [0.9]}},
    )
    _trial(tmp_path / "runs" / "b", {"learning_rate": "warmup"})  # not a number: not shown
    (tmp_path / "runs" / "c").mkdir()
    _trial(tmp_path / "runs" / "c", {"learning_rate": 0.5})
    bad = tmp_path / "runs" / "c" / "workers" / "worker_0" / "config" / "000001.json"
    bad.write_text("{not json")
    dashboard = serve(tmp_path / "runs")
    _, body = get(dashboard.url + "api/runs")
    runs = {r["name"]: r for r in body["runs"]}
    assert (runs["a"]["learning_rate"], runs["a"]["batch_size"]) == (0.1, 32)
    assert (runs["b"]["learning_rate"], runs["b"]["batch_size"]) == (None, None)
    assert runs["c"]["learning_rate"] == 0.5
    assert any("config/000001.json" in p for p in runs["c"]["problems"])
    assert "config" not in runs["a"]  # the list stays small: the page asks for the rest
    _, detail = get(dashboard.url + f"api/run/{runs['a']['id']}")
    assert detail["config"]["optimizer"] == {"betas": [0.9]}
    assert "python" in detail["config"]["packages"]


def test_the_page_sorts_by_learning_rate_and_shows_the_configuration(
    tmp_path: Path, serve, browser
) -> None:
    for name, lr in (("slow", 0.001), ("fast", 0.1), ("none", None)):
        _trial(tmp_path / "runs" / name, {} if lr is None else {"learning_rate": lr})
    dashboard = serve(tmp_path / "runs")
    page = browser.visit(dashboard.url)
    rows = "return [...document.querySelectorAll('#runs tbody tr a')].map(a => a.textContent);"
    browser.until(rows, lambda v: len(v) == 3)
    page.find_element("css selector", "th[data-sort=learning_rate]").click()
    assert browser.until(rows, lambda v: v[:2] == ["slow", "fast"])[2] == "none"
    page.find_element("css selector", "th[data-sort=learning_rate]").click()
    assert browser.until(rows, lambda v: v[:2] == ["fast", "slow"])[2] == "none"
    assert browser.errors() == []
