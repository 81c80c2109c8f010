"""The dashboard's memory is bounded (issue 48, item 4): what it keeps of every run it serves
(answers, the series objects' heads, report pages) counts against one server-wide byte
budget (``--cache-mb``), least recently used out, and what was dropped is read again."""

from __future__ import annotations

import numpy as np
import pytest

import tensortap as tt
from tests.helpers.held_values import HeldValues
from tests.helpers.json_get import get_json as get

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

SERIES, STEPS = 60, 1500


def wide_run(out) -> None:
    """``SERIES`` scalars over ``STEPS`` steps, published in several segments (several heads)."""
    hook = tt.Hook(out, save_config=tt.SaveConfig(save_interval=1))
    for step in range(STEPS):
        for i in range(SERIES):
            hook.save_scalar(f"metric_{i:03d}", float(step * (i + 1) % 97))
        hook.next_step()
        if step % 500 == 499:
            hook.flush()
    hook.close()


def test_every_chart_of_a_wide_run_is_served_within_a_tiny_budget_and_read_again(
    tmp_path, serve
) -> None:
    wide_run(tmp_path / "wide")
    dashboard = serve(tmp_path / "wide", warm=False, cache_mb=1)
    budget = dashboard.catalog.budget
    assert budget.limit == 1 << 20
    _, runs = get(dashboard.url + "api/runs")
    (ident,) = [r["id"] for r in runs["runs"]]
    curves = f"{dashboard.url}api/run/{ident}/curves?stat=value&name="
    first: dict[str, dict] = {}
    for i in range(SERIES):  # every series' chart data, one request each, as a page asks
        status, body = get(curves + f"metric_{i:03d}")
        assert status == 200
        (line,) = body["series"]
        first[line["name"]] = line
        assert budget.size <= budget.limit and budget.peak <= budget.limit
    assert budget.evicted > 0  # 60 lines of 1,500 points do not fit in 1 MB: some were dropped
    steps = np.arange(STEPS)
    for i in range(SERIES):  # asked again: the dropped ones read again, the same values
        name = f"metric_{i:03d}"
        _, body = get(curves + name)
        (line,) = body["series"]
        assert line == first[name]
        expected = (steps * (i + 1) % 97).astype(float)
        assert line["points"] == STEPS and set(line["y"]) <= set(expected.tolist())
        assert line["y"] == expected[np.asarray(line["x"])].tolist()
        assert budget.size <= budget.limit and budget.peak <= budget.limit
    # a run no page asks for any more is closed: all it kept leaves the budget at once (its
    # reader's heads too, not only its answers)
    assert dashboard.catalog.close_idle(idle_secs=0) == 1
    assert budget.size == 0


def test_the_cache_size_is_a_positive_number_of_megabytes(tmp_path) -> None:
    from tensortap.exceptions import InvalidConfigError
    from tensortap.serve._catalog import Catalog

    (tmp_path / "runs").mkdir()
    for bad in (0, -5, 1.5, True, "300"):
        with pytest.raises(InvalidConfigError, match="whole number of megabytes"):
            Catalog([str(tmp_path / "runs")], cache_mb=bad)  # type: ignore[arg-type]
    assert Catalog([str(tmp_path / "runs")], cache_mb=3).budget.limit == 3 << 20


def test_the_cli_takes_cache_mb() -> None:
    import argparse

    from tensortap.cli import _serve

    parser = argparse.ArgumentParser()
    _serve.add_parser(parser.add_subparsers())
    assert parser.parse_args(["serve", "--cache-mb", "64"]).cache_mb == 64
    assert parser.parse_args(["serve"]).cache_mb == 256


def long_run(out) -> None:
    """A loss at every one of 3,000 steps and 20 metrics every 10th step (9,000 values), in
    segments of 50 steps rolled up two by two (each object: 100 steps, the loss's block 100
    values, its step table 200 values' bytes)."""
    from tensortap.writer import WriterOptions

    hook = tt.Hook(
        out,
        save_config=tt.SaveConfig(save_interval=1),
        writer_options=WriterOptions(compact=False),
    )
    for step in range(3000):
        hook.save_scalar("loss", float(np.sin(step / 50)) + (9.0 if step == 1234 else 0.0))
        if step % 10 == 0:
            for i in range(20):
                hook.save_scalar(f"metric_{i:02d}", float((step * (i + 3)) % 101))
        hook.next_step()
        if step % 50 == 49:
            hook.flush()
    assert hook.close().healthy


def test_a_curves_request_of_long_series_holds_at_most_the_bound_and_answers_the_same(
    tmp_path, serve, monkeypatch
) -> None:
    """Issue 48, item 4: a curves request of many long series read them all at once (every
    value of every series, for a few hundred buckets each). Now the reader holds at most
    ``BUCKET_READ_VALUES`` values at once, and every answer (all charts, a zoomed window, one
    chart) is the one read whole, the run's clock (600 points of the loss's wall times) too."""
    from tensortap.serve import _data
    from tensortap.trials import _series
    from tensortap.writer import _series as writer_series

    # a line read as saved is bounded by RAW_POINTS: no more than a bucketed read holds
    assert _data.RAW_POINTS <= _series.BUCKET_READ_VALUES
    monkeypatch.setattr(writer_series, "ROLLUP_SEGMENTS", 2)
    long_run(tmp_path / "long")
    monkeypatch.setattr(_data, "RAW_POINTS", 1000)  # a line read as saved: at most the bound
    asked = ["limit=200", "limit=200&x0=700&x1=2100", "name=loss&stat=value"]

    def answers(most: int) -> tuple[list[dict], int]:
        monkeypatch.setattr(_series, "BUCKET_READ_VALUES", most, raising=False)
        dashboard = serve(tmp_path / "long", warm=False)
        _, runs = get(dashboard.url + "api/runs")
        (ident,) = [r["id"] for r in runs["runs"]]
        base = f"{dashboard.url}api/run/{ident}/curves?"
        held = HeldValues(monkeypatch)
        found = []
        for query in asked:
            status, body = get(base + query)
            assert status == 200
            found.append({k: body[k] for k in ("series", "total", "last_step", "clock")})
        monkeypatch.undo()  # the counting wrappers (and the bound) off again
        monkeypatch.setattr(_data, "RAW_POINTS", 1000)
        return found, held.most

    whole, _ = answers(10**9)
    bounded, most = answers(1000)
    assert bounded == whole
    assert [len(a["series"]) for a in whole] == [21, 21, 1]
    assert len(whole[0]["clock"]["steps"]) == 600  # the loss's 3,000 steps walked in windows
    assert most <= 1000, most
