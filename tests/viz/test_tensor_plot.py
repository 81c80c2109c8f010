"""TensorPlot: the figure's data is the trial's (normalised per layer), every rank up to 4 is
drawn, larger ones are left out by name, bad options fail at construction, and the page opens
offline in a real headless Chromium with no console errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.exceptions import InvalidConfigError

pytest.importorskip("plotly")
from tensortap.viz import TensorPlot
from tensortap.viz._tensor_plot import normalise

STEPS = 4
BATCH = 4


def values(step: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(step)
    logits = np.zeros((BATCH, 10), np.float32)
    logits[np.arange(BATCH), [3, 1, 4, 1]] = 5.0 + step
    return {
        "conv1_relu_output_0": np.maximum(rng.normal(size=(BATCH, 3, 5, 6)), 0).astype(np.float32),
        "dense0_relu_output_0": np.maximum(rng.normal(size=(BATCH, 10)), 0).astype(np.float32),
        "vector_relu_output_0": rng.normal(size=7).astype(np.float32),
        "odd_relu_output_0": rng.normal(size=(2, 2, 2, 2, 2)).astype(np.float32),
        "model_input_0": rng.uniform(size=(BATCH, 1, 8, 8)).astype(np.float32),
        "model_output_0": logits,
    }


@pytest.fixture(scope="module")
def trial(tmp_path_factory) -> tt.Trial:
    out = tmp_path_factory.mktemp("tensorplot") / "trial"
    hook = tt.Hook(out, save_config=tt.SaveConfig(save_interval=1), include_regex=".*")
    hook.set_mode(tt.modes.TRAIN)
    for step in range(STEPS):
        for name, value in values(step).items():
            hook.save_tensor(name, value, collections="all")
        hook.next_step()
    hook.close()
    return tt.create_trial(out)


def trace(plot: TensorPlot, name: str, frame: int = 0):
    (found,) = [t for t in plot.fig.frames[frame].data if t.name == name]
    return found


def test_layers_frames_and_values_are_the_trials(trial: tt.Trial) -> None:
    plot = TensorPlot(
        regex=r".*relu_output",
        path=trial,
        batch_sample_id=1,
        title="Relu outputs",
        label=r"model_input_0",
        prediction=r"model_output_0",
    )
    assert plot.steps == [0, 1, 2, 3] and len(plot.fig.frames) == STEPS
    assert plot.layers == ["conv1_relu_output_0", "dense0_relu_output_0", "vector_relu_output_0"]
    assert (
        set(plot.skipped) == {"odd_relu_output_0"} and "rank 5" in plot.skipped["odd_relu_output_0"]
    )
    assert plot.trace_count == 4 and all(len(f.data) == 4 for f in plot.fig.frames)
    for frame, step in enumerate(plot.steps):
        saved = values(step)
        conv = trace(plot, "conv1_relu_output_0", frame)
        np.testing.assert_allclose(
            conv.marker.color, normalise(saved["conv1_relu_output_0"][1]).ravel()
        )
        assert (
            len(conv.x) == 3 * 5 * 6 and min(conv.marker.color) == 0 and max(conv.marker.color) == 1
        )
        dense = trace(plot, "dense0_relu_output_0", frame)
        np.testing.assert_allclose(dense.marker.color, normalise(saved["dense0_relu_output_0"][1]))
        vector = trace(plot, "vector_relu_output_0", frame)  # 1-D: no batch axis
        np.testing.assert_allclose(vector.marker.color, normalise(saved["vector_relu_output_0"]))
        assert len(trace(plot, "input: model_input_0", frame).x) == 64  # the 8 x 8 input image
        assert (
            plot.fig.frames[frame].layout.title.text
            == f"Relu outputs: global step {step} (TRAIN step {step}), predicted class 1"
        )
    layers_x = [float(np.mean(t.x)) for t in plot.fig.frames[0].data]
    assert layers_x == sorted(layers_x)  # input, then the layers left to right
    assert "left out: odd_relu_output_0" in plot.fig.layout.annotations[0].text


def test_batch_summed_and_every_sample(trial: tt.Trial) -> None:
    saved = values(2)["conv1_relu_output_0"]
    summed = TensorPlot(r"conv1", trial, steps=[2], batch_sample_id=-1)
    np.testing.assert_allclose(
        trace(summed, "conv1_relu_output_0").marker.color, normalise(saved.sum(0)).ravel()
    )
    every = TensorPlot(r"conv1|dense0", trial, steps=[2], batch_sample_id=None)
    conv = trace(every, "conv1_relu_output_0")
    assert len(conv.x) == BATCH * 3 * 5 * 6  # samples stacked along the channel axis
    np.testing.assert_allclose(conv.marker.color, normalise(saved).ravel())
    assert len(trace(every, "dense0_relu_output_0").x) == BATCH * 10  # a plane of samples x units
    assert len(every.fig.frames) == 1 and not every.fig.layout.sliders  # one step: no slider


def test_steps_as_a_count_and_thinning(trial: tt.Trial) -> None:
    plot = TensorPlot(r"conv1", trial, steps=2, batch_sample_id=None, max_points=100)
    assert plot.steps == [0, 1]
    assert 0 < len(trace(plot, "conv1_relu_output_0").x) <= 100


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_sample_id": 9}, "out of range for conv1_relu_output_0, whose batch has 4"),
        ({"batch_sample_id": -2}, "batch_sample_id must be"),
        ({"batch_sample_id": "0"}, "batch_sample_id must be"),
        ({"color_channel": 2}, "color_channel must be 1"),
        ({"steps": 0}, "steps must be"),
        ({"steps": [100]}, "no saved step to plot"),
        ({"regex": "nothing-like-this"}, "no tensor matches 'nothing-like-this'"),
        ({"regex": "("}, "is not a regular expression"),
        ({"regex": "odd"}, "nothing to draw: odd_relu_output_0: rank 5"),
        ({"label": "no-such-input"}, "no tensor matches 'no-such-input'"),
        ({"max_points": 5}, "max_points must be"),
    ],
)
def test_bad_options_fail_at_construction(trial: tt.Trial, kwargs, message) -> None:
    given = {"regex": r"conv1", "path": trial, "batch_sample_id": 0, **kwargs}
    with pytest.raises(InvalidConfigError, match=message.replace("(", r"\(")):
        TensorPlot(**given)


def test_page_is_self_contained_and_opens_in_chromium(
    trial: tt.Trial, tmp_path: Path, browser
) -> None:
    plot = TensorPlot(
        r".*relu_output",
        trial,
        batch_sample_id=0,
        label="model_input_0",
        prediction="model_output_0",
    )
    path = plot.write_html(tmp_path / "tensorplot.html")
    browser.open(path)
    found = browser.until(  # drawn once the page unpacked plotly.js (compressed in the page)
        "const d = document.querySelector('.js-plotly-plot');"
        "return d && d._transitionData ? [d.data.length, d._transitionData._frames.length,"
        " d.querySelectorAll('canvas').length,"
        " performance.getEntriesByType('resource').map(e => e.name)] : null;",
        lambda v: v is not None and v[1] == STEPS,
    )
    assert found is not None and found[0] == plot.trace_count == 4
    assert found[1] == STEPS and found[2] >= 1  # frames for the slider; a WebGL canvas drawn
    assert found[3] == []  # it loaded nothing: plotly.js is inlined, the page opens offline
    assert path.stat().st_size < 2_500_000  # compressed: plotly.js alone is 4.8 MB
    assert browser.errors() == []


def test_cli_writes_the_page(trial: tt.Trial, tmp_path: Path, capsys) -> None:
    from tensortap.cli import main

    out = tmp_path / "tp.html"
    args = ["tensorplot", trial.path, "--regex", "conv1|dense0", "--steps", "0,2", "-o", str(out)]
    assert main([*args, "--batch-sample-id", "all", "--mode", "TRAIN"]) == 0
    assert "2 layers at steps [0, 2]" in capsys.readouterr().out and out.stat().st_size > 1_000_000
    assert main([*args, "--batch-sample-id", "first"]) == 2
    assert "--batch-sample-id a number, -1 or all (got 'first')" in capsys.readouterr().err
    assert main([*args, "--batch-sample-id", "99"]) == 2  # out of range: said, not a traceback


def test_the_default_steps_say_their_mode_and_a_mode_takes_its_own_steps(tmp_path) -> None:
    """TRAIN and EVAL steps interleaved: without a mode, the frames are global steps and each
    says which mode's step it is (its slider label and title); with one, that mode's steps."""
    hook = tt.Hook(tmp_path / "t", save_config=tt.SaveConfig(save_interval=1), include_regex=".*")
    for step in range(3):
        hook.set_mode(tt.modes.TRAIN)
        hook.save_tensor("a_relu_output_0", np.full((2, 3), step, np.float32), "all")
        hook.next_step()
        hook.set_mode(tt.modes.EVAL)
        hook.save_tensor("a_relu_output_0", np.full((2, 3), 10 + step, np.float32), "all")
        hook.next_step()
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    both = TensorPlot(r"relu_output", trial, steps=4, batch_sample_id=0)
    labels = [s.label for s in both.fig.layout.sliders[0].steps]
    assert labels == [
        "global step 0 (TRAIN step 0)",
        "global step 1 (EVAL step 0)",
        "global step 2 (TRAIN step 1)",
        "global step 3 (EVAL step 1)",
    ]
    assert both.fig.frames[1].layout.title.text.endswith("global step 1 (EVAL step 0)")
    evaluated = TensorPlot(r"relu_output", trial, steps=3, batch_sample_id=0, mode=tt.modes.EVAL)
    assert evaluated.steps == [0, 1, 2]
    assert [s.label for s in evaluated.fig.layout.sliders[0].steps] == [
        "EVAL step 0",
        "EVAL step 1",
        "EVAL step 2",
    ]
