"""The report of any trial draws the scalars it holds (issue 48): a trial of ``save_scalar``
values got a page that said "No losses or metrics saved". Its charts are read back from the
page (legends and drawn points), a long line is cut to a bounded number of points, and a wide
run draws a bounded number of lines."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt

pytest.importorskip("plotly")
from tensortap.report import training_report
from tensortap.report._svg import LEFT, MOST_POINTS, RIGHT, W
from tensortap.report._training import MOST_SCALARS, SCALARS_PER_CHART, default_rules


def _scalars_run(out: Path, steps: int, series: int) -> list[str]:
    """``series`` rising scalars over ``steps`` steps (``s<i>`` = i + step / steps), one of
    them saved from the middle on only; a loss, which the losses chart draws, too."""
    hook = tt.Hook(out, save_config=tt.SaveConfig(save_interval=1), include_collections=["scalars"])
    names = [f"s{i}" for i in range(series)]
    for step in range(steps):
        for i, name in enumerate(names):
            if i == 1 and step < steps // 2:
                continue
            hook.save_scalar(name, i + step / steps)
        hook.save_scalar("loss", 1.0 / (1 + step), "losses")
        hook.next_step()
    assert hook.close().healthy
    return names


def _charts(page: str) -> dict[str, str]:
    """Each chart's SVG by its title."""
    found = {}
    for svg in re.findall(r"<svg.*?</svg>", page, flags=re.S):
        title = re.search(r'font-weight="bold">([^<]+)</text>', svg)
        if title:
            found[title.group(1)] = svg
    return found


def _lines(svg: str) -> list[list[tuple[float, float]]]:
    """The points of each polyline drawn."""
    return [
        [tuple(float(v) for v in point.split(",")) for point in points.split()]  # type: ignore[misc]
        for points in re.findall(r'<polyline[^>]* points="([^"]*)"', svg)
    ]


def test_a_trial_of_scalars_gets_them_drawn(tmp_path: Path) -> None:
    steps = 3000  # more than a line draws: 2 * MOST_POINTS
    names = _scalars_run(tmp_path, steps, 12)
    page = training_report(tt.create_trial(tmp_path), rules=[])
    assert "No losses, metrics, vital signs or scalars saved" not in page
    charts = _charts(page)
    assert set(charts) == {"losses", "scalars (1-8 of 12)", "scalars (9-12 of 12)"}
    by_chart = {"scalars (1-8 of 12)": names[:8], "scalars (9-12 of 12)": names[8:]}
    for title, expected in by_chart.items():
        svg = charts[title]
        legend = re.findall(r'font-size="11">([^<]+)<tspan', svg)
        assert legend == expected  # the loss is drawn with the losses, not again
        lines = _lines(svg)
        assert len(lines) == len(expected)
        for name, points in zip(expected, lines, strict=True):
            assert MOST_POINTS <= len(points) <= 2 * MOST_POINTS + 2, (name, len(points))
            xs = [x for x, _ in points]
            ys = [y for _, y in points]
            assert xs == sorted(xs)
            # every line ends at the last step; s1 starts half-way
            assert xs[-1] == pytest.approx(W - RIGHT, abs=0.1)
            first = LEFT + (W - LEFT - RIGHT) * (0.5 if name == "s1" else 0.0)
            assert xs[0] == pytest.approx(first, abs=1.0), name
            assert ys == sorted(ys, reverse=True)  # rising values: up the page
    # the lines are where their values are: s0 (0..1) lies below s7 (7..8) on one scale
    low, high = _lines(charts["scalars (1-8 of 12)"])[0], _lines(charts["scalars (1-8 of 12)"])[-1]
    assert min(y for _, y in low) > max(y for _, y in high)


def test_a_wide_run_draws_a_bounded_number_of_scalars(tmp_path: Path) -> None:
    series = MOST_SCALARS + 6
    names = _scalars_run(tmp_path, 10, series)
    page = training_report(tt.create_trial(tmp_path), rules=[])
    charts = [t for t in _charts(page) if t.startswith("scalars")]
    assert len(charts) == MOST_SCALARS // SCALARS_PER_CHART
    assert f"scalars (1-8 of {series})" in charts
    drawn = re.findall(r'font-size="11">(s\d+)<tspan', page)
    assert sorted(drawn, key=lambda n: int(n[1:])) == names[:MOST_SCALARS]
    assert "6 more scalars are not drawn here (s64, s65, s66, s67, s68, ...)" in page


def _unstamped(page: str) -> str:
    """A page without the minute it was made (two pages made a minute apart are the same)."""
    made = re.compile(r"; made \d{4}-\d\d-\d\d \d\d:\d\d\.")
    assert len(made.findall(page)) == 1, "a page names the minute it was made once"
    return made.sub("; made (when).", page)


def test_the_report_of_a_series_run_reads_no_index_rows(tmp_path: Path) -> None:
    """A page of curves alone reads the trial as an outline: the same page as from the trial
    read whole, at a peak far below the index's rows (64 bytes a saved value), which it used
    to read whole before drawing (936 MB for 10^7 values). Imports are not counted (a first
    page is written before)."""
    import tracemalloc

    from tensortap.report import write_report

    steps, series = 2000, 40
    hook = tt.Hook(  # every segment kept: a compacted run's merged index is one object
        tmp_path / "run",
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["scalars"],
        writer_options=tt.WriterOptions(compact=False),
    )
    for step in range(steps):
        for i in range(series):
            hook.save_scalar(f"s{i}", i + step / steps)
        hook.next_step()
        if step % 100 == 99:
            hook.flush()  # segments of 256 kB, as flush_secs cuts a long run's
    assert hook.close().healthy
    values = steps * series
    whole = training_report(tt.create_trial(tmp_path / "run"))  # no rule reads scalars alone
    write_report(tmp_path / "run", tmp_path / "page.html")  # what it imports is not counted
    tracemalloc.start()
    try:
        page = write_report(tmp_path / "run", tmp_path / "page.html").read_text()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # every section as before; the minute the page was made may differ between the two
    assert _unstamped(page) == _unstamped(whole)
    assert "scalars (1-8 of 40)" in _charts(page)
    # less than the index's rows alone, 64 bytes a value (5.1 MB here; read whole, the peak
    # was 10.3 MB): an outline holds a few index objects at a time (3.2 MB with the page)
    assert peak < 64 * values, f"{peak:,} bytes at peak for {values:,} values"


def test_a_page_that_shows_saved_values_still_reads_them(tmp_path: Path) -> None:
    """Layer health and rules read saved values: their pages read the trial whole (an outline
    would refuse them)."""
    from tensortap.report._training import report_trial

    hook = tt.Hook(
        tmp_path,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["gradients", "losses"],
    )
    for step in range(5):
        hook.save_tensor("layer1.weight_grad", np.full((3, 3), 1.0 + step), "gradients")
        hook.save_scalar("loss", 1.0 / (1 + step), "losses")
        hook.next_step()
    assert hook.close().healthy
    outline = tt.create_trial(tmp_path, records=False)
    assert report_trial(outline).records and report_trial(outline, job=True).records
    page = training_report(tmp_path, rules=[])
    assert "log10 gradient norm per layer" in page
    losses_only = tmp_path / "losses"
    hook = tt.Hook(losses_only, save_config=tt.SaveConfig(save_interval=1))
    for step in range(5):
        hook.save_scalar("loss", 1.0 / (1 + step), "losses")
        hook.next_step()
    assert hook.close().healthy
    outline = tt.create_trial(losses_only, records=False)
    assert not report_trial(outline, rules=[]).records  # curves alone
    assert not report_trial(outline, job=True).records  # the job's summary says what rules found
    assert report_trial(outline).records == bool(default_rules(tt.create_trial(losses_only)))


def test_a_trial_of_vital_signs_gets_a_chart_for_each(tmp_path: Path) -> None:
    """A job's vital signs (the loss, gradient norm, learning rates of every step) are drawn,
    one chart each, a parameter group's learning rate on the learning rate's chart: a trial
    that holds them and nothing else was "No losses, metrics or scalars saved"."""
    hook = tt.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=1))
    steps = 50
    for step in range(steps):
        hook.save_vitals(
            {"loss": 2.0 / (1 + step), "grad_norm": 1.0 + step % 3, "lr": 0.1, "lr/1": 0.01}
        )
        hook.next_step()
    hook.close()
    page = training_report(tt.create_trial(tmp_path), rules=[])
    assert "No losses, metrics, vital signs or scalars saved" not in page
    charts = _charts(page)
    assert list(charts) == ["vitals/loss", "vitals/grad_norm", "vitals/lr"]
    legend = re.findall(r'font-size="11">([^<]+)<tspan', charts["vitals/lr"])
    assert legend == ["vitals/lr", "vitals/lr/1"]
    (loss,) = _lines(charts["vitals/loss"])
    assert len(loss) == steps
    ys = [y for _, y in loss]
    assert ys == sorted(ys)  # a falling loss: its points drawn lower (larger y) step by step


def test_a_long_run_s_charts_are_drawn_without_holding_their_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each chart's lines are shrunk as they are read, a window of steps at a time, when they
    do not fit in one read (issue 48: a chart of 8 lines of 10^6 steps held them all): the
    series reader holds at most its bound of values, and the page is the one drawn from lines
    read whole (the same points, NaN and Inf runs across windows, both modes)."""
    from tensortap.trials import _series
    from tensortap.writer import WriterOptions
    from tensortap.writer import _series as writer_series
    from tests.helpers.held_values import HeldValues

    # objects of 50 steps: an object is the unit read, its chart's blocks well under the bound
    monkeypatch.setattr(writer_series, "ROLLUP_SEGMENTS", 2)
    hook = tt.Hook(
        tmp_path / "run",
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["scalars"],
        writer_options=WriterOptions(compact=False),
    )
    for step in range(3000):
        hook.set_mode(tt.modes.EVAL if step % 500 >= 450 else tt.modes.TRAIN)
        for i in range(10):
            value = float(np.sin(step / (20 + i))) + (50.0 if step == 1234 + i else 0.0)
            hook.save_scalar(f"s{i}", np.nan if 990 <= step < 1020 and i == 3 else value)
        hook.save_scalar("loss", np.inf if step == 2001 else 1.0 / (1 + step), "losses")
        hook.next_step()
        if step % 25 == 24:
            hook.flush()
    assert hook.close().healthy

    def page(most: int) -> tuple[str, int]:
        monkeypatch.setattr(_series, "BUCKET_READ_VALUES", most, raising=False)
        with monkeypatch.context() as counting:
            held = HeldValues(counting)
            return training_report(tmp_path / "run", rules=[]), held.most

    whole, _ = page(10**9)
    bounded, most = page(1000)
    assert bounded == whole
    charts = _charts(whole)
    assert {"losses", "scalars (1-8 of 10)", "scalars (9-10 of 10)"} <= set(charts)
    assert most <= 1000, most
