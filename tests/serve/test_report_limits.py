"""The dashboard's report of a long run is bounded work (issue 45: ``/report`` of a 10^6-step
run took 111 s and 1.17 GB in the server): it reads the run's own trial (no trial opened, no
index read again per request), never judges rules per request over a long bare trial, and
draws a bounded number of points. Counted, never timed."""

from __future__ import annotations

import re
import shutil
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensortap.jobs._record import JobRecord, write_json
from tensortap.query._curves import LINE_BUCKETS
from tensortap.rules._rule import Rule
from tensortap.testing import TrialBuilder
from tensortap.trials._index import TrialIndex
from tensortap.trials._trial import Trial
from tests.helpers.json_get import get_json as get

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from tensortap.serve import start

STEPS = 100_000


def _loss_trial(path: Path, steps: int) -> None:
    builder = TrialBuilder(path)
    for step in range(steps):
        builder.step({"loss": np.float32(2.0 / (1.0 + step * 1e-3))})
    builder.close()


@pytest.fixture(scope="module")
def long_runs(tmp_path_factory) -> Path:
    """``runs/`` with a bare trial of 10^5 steps and a finished job whose trial is a copy."""
    runs = tmp_path_factory.mktemp("long") / "runs"
    _loss_trial(runs / "bare", STEPS)
    record = JobRecord(runs / "job")
    record.create({"name": "job", "created": 1_700_000_000.0, "command": ["train.py"]})
    shutil.copytree(runs / "bare", runs / "job" / "trial")
    write_json(
        record.summary_file,
        {
            "job": "job",
            "status": "Completed",
            "training": {"status": "Completed", "exit_code": 0},
            "rules": [],
        },
    )
    return runs


@pytest.fixture
def work(monkeypatch) -> Counter[str]:
    """Counts of the work a request does: trials opened, index reads, rule evaluations."""
    counts: Counter[str] = Counter()

    def counting(cls: type, name: str) -> None:
        real = getattr(cls, name)

        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return real(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, counted)

    counting(Trial, "__init__")
    counting(TrialIndex, "_ingest")
    counting(Rule, "evaluate")
    return counts


#: How long a page may take before the test gives up: not a duration asserted (the work is
#: counted), a bound on a server that hangs; a 10^5-step report took over 60 s on a 2-core
#: machine running three other suites.
PAGE_TIMEOUT_S = 600


def _page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=PAGE_TIMEOUT_S) as answer:
        assert answer.status == 200
        return str(answer.read().decode("utf-8"))


def _most_points(page: str) -> int:
    """The most points one line of the page's charts draws."""
    lines = re.findall(r'<polyline[^>]* points="([^"]*)"', page)
    assert lines, "the page draws no line"
    return max(len(points.split()) for points in lines)


def _ids(url: str) -> dict[str, str]:
    status, body = get(url + "api/runs")
    assert status == 200
    return {run["name"]: run["id"] for run in body["runs"]}


@pytest.mark.parametrize("name", ["job", "bare"])
def test_the_report_of_a_long_run_is_bounded_work(long_runs, work, name) -> None:
    dashboard = start([str(long_runs)], port=0, warm=False)
    try:
        url = dashboard.url + f"report/{_ids(dashboard.url)[name]}"
        first = _page(url)
        opened, ingested = work["__init__"], work["_ingest"]
        assert opened == 1, f"{opened} trials opened for one report"
        second = _page(url)
        assert work["__init__"] == opened, "the second report opened the trial again"
        assert work["_ingest"] == ingested, "the second report read the trial's index again"
        assert work["evaluate"] == 0, f"{work['evaluate']} rule evaluations for the page"
        for page in (first, second):
            assert _most_points(page) <= 2 * LINE_BUCKETS + 2
            assert f"{STEPS} saved steps" in page
        if name == "bare":
            assert "Rules were not run for this page" in first
            assert "tensortap report" in first
    finally:
        dashboard.stop()


def test_a_short_bare_trial_is_judged_once_per_change(tmp_path, work) -> None:
    _loss_trial(tmp_path / "runs" / "short", 50)
    dashboard = start([str(tmp_path / "runs")], port=0, warm=False)
    try:
        url = dashboard.url + f"report/{_ids(dashboard.url)['short']}"
        first = _page(url)
        judged = work["evaluate"]
        assert judged > 0 and "Rules were not run" not in first
        assert "Built-in rules for the saved collections" in first
        second = _page(url)
        assert work["evaluate"] == judged, "the rules were judged again over the same trial"
        assert second == first
    finally:
        dashboard.stop()


def test_the_report_of_a_long_run_reads_no_index_rows(long_runs, work) -> None:
    """Issue 48: the report page opened the run's trial whole, the index's row of every saved
    value kept (0.9 GB of a run of 10^5 steps x 100 scalars). A page that reads no saved
    value (no layer health, no activations, no rules to run) reads an outline of the trial,
    as ``tensortap report`` does: the same page; a page that needs the rows gets them."""
    from tensortap.report import training_report
    from tensortap.serve._data import REPORT_JUDGE_STEPS

    dashboard = start([str(long_runs)], port=0, warm=False)
    try:
        ident = _ids(dashboard.url)["bare"]
        page = _page(dashboard.url + f"report/{ident}")
        assert dashboard.catalog is not None
        run = dashboard.catalog.get(ident)
        assert run is not None and run.cache.trial is not None

        def rows_kept() -> bool:
            return run.cache.trial is not None and bool(run.cache.trial.records)

        assert not rows_kept()  # an outline: no row per saved value kept
        whole = Trial(str(long_runs / "bare"))
        assert whole.records
        expected = training_report(
            whole, judge_steps=REPORT_JUDGE_STEPS, location=run.shown or run.location
        )
        assert page == expected
        # a page that reads saved values (TensorPlot of a tensor the run holds) gets the trial
        # read whole
        status, _ = get(dashboard.url + f"api/run/{ident}/tensorplot?regex=loss")
        assert status == 200
        assert rows_kept()
        assert _page(dashboard.url + f"report/{ident}") == page
    finally:
        dashboard.stop()


def test_a_run_page_of_scalars_reads_no_index_rows_for_its_activations(long_runs) -> None:
    """A run's page asks for its activations (TensorPlot) and its embeddings as it opens.
    Over a run of scalars there is nothing to draw: that is said from an outline of the
    trial (its names), never by reading the index's row of every saved value (0.9 GB of a
    10^5-step run of 100 scalars); a run that holds an activation still gets it drawn."""
    dashboard = start([str(long_runs)], port=0, warm=False)
    try:
        ident = _ids(dashboard.url)["bare"]
        status, plot = get(dashboard.url + f"api/run/{ident}/tensorplot")
        assert status == 200 and plot["figure"] is None
        assert "no tensor matches" in plot["note"]
        status, embedded = get(dashboard.url + f"api/run/{ident}/embeddings")
        assert status == 200 and embedded["figure"] is None and embedded["names"] == ["loss"]
        assert dashboard.catalog is not None
        run = dashboard.catalog.get(ident)
        assert run is not None and run.cache.trial is not None
        assert not run.cache.trial.records  # an outline: no row per saved value kept
    finally:
        dashboard.stop()


def test_a_run_that_saved_activations_still_gets_them_drawn(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path / "runs" / "relu")
    for step in range(3):
        builder.step(
            {"loss": np.float32(1.0 / (1 + step)), "fc/relu_output": np.ones((4, 8), np.float32)}
        )
    builder.close()
    dashboard = start([str(tmp_path / "runs")], port=0, warm=False)
    try:
        ident = _ids(dashboard.url)["relu"]
        status, plot = get(dashboard.url + f"api/run/{ident}/tensorplot")
        assert status == 200 and plot["figure"] is not None, plot
    finally:
        dashboard.stop()
