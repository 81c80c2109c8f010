"""Embeddings over time: PCA/t-SNE of a layer's output per step, the live follower of seed 004
on a trial being written, and the animated figure (also opened in headless Chromium)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.exceptions import InvalidConfigError

pytest.importorskip("plotly")
from tensortap.viz import LiveEmbeddings, embeddings_over_time, plot_embeddings
from tensortap.viz._embeddings import EmbeddingFrame, as_labels, embed

BATCH = 24


def batch(step: int) -> tuple[np.ndarray, np.ndarray]:
    """Three classes whose clusters separate as the steps go on."""
    rng = np.random.default_rng(step)
    labels = np.arange(BATCH) % 3
    centres = np.eye(3, 6) * step
    return (centres[labels] + rng.normal(size=(BATCH, 6))).astype(np.float32), labels


def save_eval_step(hook: tt.Hook, step: int, bottleneck: bool = True) -> None:
    hook.set_mode(tt.modes.TRAIN)  # a train step between evaluations: not followed
    hook.save_tensor("bottleneck", np.zeros((BATCH, 6), np.float32), collections="all")
    hook.next_step()
    hook.set_mode(tt.modes.EVAL)
    features, labels = batch(step)
    if bottleneck:
        hook.save_tensor("bottleneck", features, collections="all")
    hook.save_tensor("labels", np.eye(3)[labels], collections="all")  # one-hot is fine
    hook.next_step()


def test_pca_is_the_svd_and_keeps_its_orientation() -> None:
    x = np.random.default_rng(0).normal(size=(50, 5)) * [5, 3, 1, 1, 1]
    points, components = embed(x)
    centred = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    np.testing.assert_allclose(np.abs(points), np.abs(centred @ vt[:2].T))
    assert components is not None
    again, _ = embed(x, reference=-components)  # the next frame follows the reference's sign
    np.testing.assert_allclose(again, -points)


def test_tsne_is_seeded() -> None:
    x = np.random.default_rng(0).normal(size=(40, 5))
    first, _ = embed(x, method="tsne", random_state=3)
    second, _ = embed(x, method="tsne", random_state=3)
    assert first.shape == (40, 2) and np.isfinite(first).all()
    np.testing.assert_allclose(first, second)


def test_labels_from_ids_or_scores() -> None:
    assert as_labels(np.array([2.0, 0.0, 1.0]), 3, "y").tolist() == [2, 0, 1]
    assert as_labels(np.eye(3)[[1, 2, 0]], 3, "y").tolist() == [1, 2, 0]
    with pytest.raises(InvalidConfigError, match="has 4 values for 3 samples"):
        as_labels(np.arange(4), 3, "y")
    with pytest.raises(InvalidConfigError, match="method must be one of"):
        embed(np.zeros((5, 2)), method="umap")


def test_over_time_skips_steps_without_the_tensor(tmp_path: Path) -> None:
    hook = tt.Hook(tmp_path / "t", save_config=tt.SaveConfig(save_interval=1), include_regex=".*")
    for step in range(4):
        save_eval_step(hook, step, bottleneck=step != 2)
    hook.close()
    frames = embeddings_over_time(tmp_path / "t", "bottleneck", "labels")  # EVAL by default
    assert [f.step for f in frames] == [0, 1, 3]
    points, _ = embed(batch(3)[0])
    np.testing.assert_allclose(np.abs(frames[-1].points), np.abs(points), rtol=1e-6)
    assert frames[-1].labels.tolist() == batch(3)[1].tolist()
    with pytest.raises(InvalidConfigError, match="has no tensor 'bottlenek'"):
        embeddings_over_time(tmp_path / "t", "bottlenek", "labels")


def test_live_mode_follows_a_trial_being_written(tmp_path: Path) -> None:
    out = tmp_path / "t"
    hook = tt.Hook(out, save_config=tt.SaveConfig(save_interval=1), include_regex=".*")
    trial = tt.create_trial(out)  # opened before anything is written
    live = LiveEmbeddings(trial, "bottleneck", "labels", poll_interval=0.01, timeout=60)
    frames = iter(live)
    save_eval_step(hook, 0)
    hook.flush()
    first = next(frames)  # polls until the step is published
    assert first.step == 0 and not trial.loaded_all_steps  # training is still running
    save_eval_step(hook, 1, bottleneck=False)  # TensorUnavailableForStep: skipped
    save_eval_step(hook, 2)
    hook.flush()
    assert next(frames).step == 2 and live.skipped == [1]
    save_eval_step(hook, 3)
    hook.close()
    assert [f.step for f in frames] == [3]  # the last step, then it ends with training
    assert [f.step for f in live.frames] == [0, 2, 3] and not live.timed_out


def test_live_mode_gives_up_at_its_timeout_and_names_a_wrong_tensor(tmp_path: Path) -> None:
    out = tmp_path / "t"
    hook = tt.Hook(out, save_config=tt.SaveConfig(save_interval=1), include_regex=".*")
    save_eval_step(hook, 0)
    hook.flush()
    live = LiveEmbeddings(out, "bottleneck", "labels", poll_interval=0.01, timeout=0.05)
    assert [f.step for f in live] == [0] and live.timed_out
    hook.close()
    with pytest.raises(InvalidConfigError, match="has no tensor 'bottlenek'"):
        list(LiveEmbeddings(out, "bottlenek", "labels", poll_interval=0.01))
    with pytest.raises(InvalidConfigError, match="poll_interval must be > 0"):
        LiveEmbeddings(out, "bottleneck", "labels", poll_interval=0)


def test_animated_figure_has_a_trace_per_label_and_opens_in_chromium(
    tmp_path: Path, browser
) -> None:
    rng = np.random.default_rng(0)
    frames = [
        EmbeddingFrame(step, rng.normal(size=(30, 2)), np.arange(30) % 4) for step in (0, 10, 20)
    ]
    figure = plot_embeddings(frames, title="bottleneck")
    assert len(figure.data) == 4 and len(figure.frames) == 3
    for frame, plotted in zip(frames, figure.frames, strict=True):
        for label, trace in enumerate(plotted.data):
            np.testing.assert_allclose(trace.x, frame.points[frame.labels == label, 0])
    assert figure.frames[2].layout.title.text == "bottleneck: step 20"
    with pytest.raises(InvalidConfigError, match="no frames to plot"):
        plot_embeddings([])
    path = tmp_path / "embeddings.html"
    figure.write_html(path, include_plotlyjs=True)
    browser.open(path)
    # plotly draws after the page has loaded (newPlot is a promise): polled with a deadline,
    # not read once (two test workers' browsers at once made it late)
    count = browser.until(
        "const d = document.querySelector('.js-plotly-plot'); return d ? d.data.length : null;",
        lambda n: n is not None,
    )
    assert count == 4 and browser.errors() == []
    shown = browser.until(  # the slider's handle glides to its place: poll with a deadline
        "const t = document.querySelector('.gtitle'), s = document.querySelector('.slider-label');"
        "return t && s ? [t.textContent, s.textContent] : null;",
        lambda v: v == ["bottleneck: step 20", "step 20"],
    )
    assert shown == ["bottleneck: step 20", "step 20"]  # title and slider at one step: the last
