"""Plots: non-empty figures whose data equals the trial's, saved as PNG and SVG headless."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.exceptions import InvalidConfigError

pytest.importorskip("matplotlib")
from tensortap import viz
from tensortap.viz._distributions import distribution_data
from tensortap.viz._health import layer_health

LAYERS = ["layer1", "layer2", "layer10"]


@pytest.fixture(scope="module")
def trial(tmp_path_factory) -> tt.Trial:
    out = tmp_path_factory.mktemp("viz") / "trial"
    rng = np.random.default_rng(0)
    hook = tt.Hook(
        out,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["losses", "weights", "gradients", "relu_activations"],
    )
    hook.set_mode(tt.modes.TRAIN)
    for step in range(8):
        hook.save_tensor("loss", np.float32(1.0 / (step + 1)), collections="losses")
        hook.save_tensor("aux_loss", np.float32(0.1 * step), collections="losses")
        hook.save_tensor("fc.weight", rng.normal(0, 1 + step, 500), collections="weights")
        for depth, layer in enumerate(LAYERS):
            grad = np.full(16, 10.0 ** -(depth + step / 4), np.float32)
            hook.save_tensor(f"{layer}.grad", grad, collections="gradients")
            act = np.where(np.arange(20) < step + depth, 0.0, 1.0).astype(np.float32)
            hook.save_tensor(f"{layer}.relu", act, collections="relu_activations")
        hook.next_step()
    hook.set_mode(tt.modes.EVAL)
    for step in range(3):
        hook.save_tensor("loss", np.float32(5.0 + step), collections="losses")
        hook.next_step()
    hook.close()
    return tt.create_trial(out)


def saved_files(figure, tmp_path: Path) -> None:
    for suffix, magic in ((".png", b"\x89PNG"), (".svg", b"<?xml")):
        path = tmp_path / f"figure{suffix}"
        figure.savefig(path)
        assert path.read_bytes().startswith(magic) and path.stat().st_size > 1000


def test_plot_tensors_draws_each_tensor_of_a_collection(trial: tt.Trial, tmp_path: Path) -> None:
    figure = viz.plot_tensors(trial, collection="losses", ylabel="Loss")
    (ax,) = figure.axes
    lines = {str(line.get_label()): np.asarray(line.get_xydata()) for line in ax.lines}
    assert sorted(lines) == ["aux_loss (TRAIN)", "loss (EVAL)", "loss (TRAIN)"]  # never joined
    loss = trial.tensor("loss")
    for mode in (tt.modes.TRAIN, tt.modes.EVAL):
        expected = [
            (trial.global_step(mode, s), float(loss.value(s, mode=mode)))
            for s in loss.steps(mode=mode)
        ]
        np.testing.assert_allclose(lines[f"loss ({mode.name})"], expected)
    assert ax.get_xlabel() == "global step"
    assert ax.get_ylabel() == "Loss"
    saved_files(figure, tmp_path)
    (eval_line,) = viz.plot_tensors(trial, regex="^loss$", mode=tt.modes.EVAL).axes[0].lines
    np.testing.assert_allclose(np.asarray(eval_line.get_xydata()), [(0, 5.0), (1, 6.0), (2, 7.0)])
    _, norms = viz.tensor_series(trial, "fc.weight", reduction="l2")
    assert norms[3] == pytest.approx(np.linalg.norm(trial.tensor("fc.weight").value(3)))


def test_plot_tensors_marks_nan_where_the_line_breaks(tmp_path: Path) -> None:
    hook = tt.Hook(tmp_path / "t", save_config=tt.SaveConfig(save_interval=1))
    for step in range(6):
        hook.save_tensor("loss", np.float32(np.nan if step >= 3 else 1.0), collections="losses")
        hook.next_step()
    hook.close()
    ax = viz.plot_tensors(tt.create_trial(tmp_path / "t"), collection="losses").axes[0]
    marks = {line.get_label(): np.asarray(line.get_xdata()).tolist() for line in ax.lines}
    assert marks["loss: NaN/Inf"] == [3, 4, 5]


def test_distributions_are_the_values_quantiles_and_histograms(
    trial: tt.Trial, tmp_path: Path
) -> None:
    values = trial.tensor("fc.weight").values()
    figure = viz.plot_distribution(trial, "fc.weight")
    median = np.asarray(figure.axes[0].lines[0].get_xydata())
    np.testing.assert_allclose(median, [(s, np.median(v)) for s, v in sorted(values.items())])
    data = distribution_data(trial, "fc.weight", bins=20)
    assert data["histograms"].shape == (8, 20) and data["histograms"][5].sum() == 500
    heat = viz.plot_distribution(trial, "fc.weight", kind="heatmap", bins=20)
    image = heat.axes[0].images[0].get_array()
    assert image is not None
    np.testing.assert_allclose(image, np.log1p(data["histograms"].T))
    saved_files(heat, tmp_path)
    with pytest.raises(InvalidConfigError, match="kind must be"):
        viz.plot_distribution(trial, "fc.weight", kind="violin")


def test_layer_health_shows_gradient_norms_and_dead_units(trial: tt.Trial, tmp_path: Path) -> None:
    data = layer_health(trial)
    assert data["gradient_names"] == [f"{layer}.grad" for layer in LAYERS]  # natural order
    for row, name in enumerate(data["gradient_names"]):
        tensor = trial.tensor(name)
        expected = [np.linalg.norm(tensor.value(s)) for s in tensor.steps()]
        np.testing.assert_allclose(data["gradient_norms"][row, :8], expected, rtol=1e-6)
    assert np.isnan(data["gradient_norms"][:, 8:]).all()  # eval steps saved no gradients
    assert data["zero_fraction"][1, 3] == pytest.approx((3 + 1) / 20)  # layer2 at step 3
    figure = viz.plot_layer_health(trial)
    assert len(figure.axes) == 4  # two heat maps, two colour bars
    shown = figure.axes[0].images[0].get_array()
    assert shown is not None
    np.testing.assert_allclose(shown, np.log10(data["gradient_norms"]))
    zeros = next(ax for ax in figure.axes if ax.images and ax is not figure.axes[0]).images[0]
    assert zeros.get_clim() == (0, 1)  # an absolute scale, not the range of the data
    saved_files(figure, tmp_path)


def test_layer_health_draws_a_dead_layer_in_black(tmp_path: Path) -> None:
    hook = tt.Hook(
        tmp_path / "t",
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["gradients"],
    )
    for _ in range(3):
        hook.save_tensor("alive.grad", np.full(4, 0.5), collections="gradients")
        hook.save_tensor("dead.grad", np.zeros(4), collections="gradients")
        hook.next_step()
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    assert layer_health(trial)["gradient_norms"][1].tolist() == [0.0, 0.0, 0.0]
    image = viz.plot_layer_health(trial).axes[0].images[0]
    array = image.get_array()
    assert array is not None
    colours = image.to_rgba(array)
    assert (colours[1, :, :3] == 0).all() and not (colours[0, :, :3] == 0).all()  # black row


def test_bad_requests_say_what_was_expected(trial: tt.Trial) -> None:
    with pytest.raises(InvalidConfigError, match="needs a collection or a regex"):
        viz.plot_tensors(trial)
    with pytest.raises(InvalidConfigError, match="no tensor matches"):
        viz.plot_tensors(trial, regex="^nothing-here$")
    with pytest.raises(tt.exceptions.MissingCollectionFiles, match="no collection 'nothing'"):
        viz.plot_tensors(trial, collection="nothing")
    with pytest.raises(InvalidConfigError, match="no tensors in the 'x' or 'y' collections"):
        viz.plot_layer_health(trial, gradients="x", activations="y")
    with pytest.raises(InvalidConfigError, match="bins must be"):
        viz.plot_distribution(trial, "fc.weight", bins=0)
