"""The input rules on real Keras fits: a model that rescales its own input with a first
``Rescaling`` layer (raw 0-16 digits through ``Rescaling(1 / 16)``) is judged on what its next
layer meets; images already in [0, 1] are normalised (a stranger's healthy subclassed model
was told "the inputs are not normalised", and a CNN whose labels were shuffled apart from its
images was diagnosed so first)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
pytest.importorskip("keras")
pytest.importorskip("tensorflow")

import keras
from sklearn.datasets import load_digits

import tensortap.keras as tt
from tensortap.rules import CheckInputImages, UnnormalisedInput, invoke_rule


def _fit(out: Path, model: keras.Model, x: np.ndarray, y: np.ndarray) -> tt.Trial:
    keras.utils.set_random_seed(0)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(True))
    hook = tt.KerasHook(str(out), include_collections=["inputs"],
                        save_config=tt.SaveConfig(save_interval=1))  # fmt: skip
    model.fit(x, y, batch_size=64, epochs=1, verbose=0, callbacks=[hook])
    hook.close()  # training has ended: the rules judge the last step instead of waiting for more
    return tt.create_trial(str(out))


def _flat(scale: float) -> keras.Model:
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((64,)), keras.layers.Rescaling(scale),
                             keras.layers.Dense(16, activation="relu"),
                             keras.layers.Dense(10)])  # fmt: skip


def _images(first: Any) -> keras.Model:
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((8, 8, 1)), *first,
                             keras.layers.Conv2D(4, 3, activation="relu"),
                             keras.layers.Flatten(), keras.layers.Dense(10)])  # fmt: skip


@pytest.mark.parametrize("scale", [1 / 16, 1.0])
def test_a_first_rescaling_layer_is_judged_by_what_it_makes_of_raw_features(
    tmp_path: Path, scale: float
) -> None:
    digits = load_digits()
    x, y = digits.data.astype("float32"), digits.target
    trial = _fit(tmp_path / "trial", _flat(scale), x, y)
    assert trial.config()["model"]["first_layer_rescaling"] == {"scale": scale, "offset": 0.0}
    summary = invoke_rule(UnnormalisedInput(trial))
    if scale == 1.0:  # Rescaling(1.0) leaves the raw pixels: RMS about 7.8
        assert summary.status.value == "IssuesFound", summary.details
        assert "rescaled by the model's first layer" in summary.findings[0].message
    else:
        assert summary.status.value == "NoIssuesFound", [f.message for f in summary.findings]


@pytest.mark.parametrize("rescaled", [True, False])
def test_images_in_unit_range_or_rescaled_to_it_are_normalised(
    tmp_path: Path, rescaled: bool
) -> None:
    """Channels-last digits: fed in [0, 1], or raw through ``Rescaling(1 / 16)``."""
    digits = load_digits()
    raw = digits.images[..., None].astype("float32")
    first = [keras.layers.Rescaling(1 / 16)] if rescaled else []
    trial = _fit(tmp_path / "trial", _images(first), raw if rescaled else raw / 16, digits.target)
    summary = invoke_rule(CheckInputImages(trial))
    assert summary.status.value == "NoIssuesFound", [f.message for f in summary.findings]
    raw_trial = _fit(tmp_path / "raw", _images([]), raw, digits.target)
    raw_summary = invoke_rule(CheckInputImages(raw_trial))
    assert raw_summary.status.value == "IssuesFound"
    assert raw_summary.findings[0].message.startswith("channel 0 of "), raw_summary.findings[0]


class NormalisedNet(keras.Model):
    """A subclassed model that lists an adapted Normalization first; ``bypass`` feeds the raw
    input to its first Dense instead (a stranger's wine model: ``h = self.normalizer(x)`` then
    ``self.hidden1(x)``)."""

    def __init__(self, normalizer: keras.layers.Layer, bypass: bool) -> None:
        super().__init__()
        self.normalizer, self.bypass = normalizer, bypass
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(3)

    def call(self, x: Any, training: bool = False) -> Any:
        h = self.normalizer(x)
        return self.out(self.hidden(x if self.bypass else h))


@pytest.mark.parametrize("bypass", [True, False])
def test_a_normalization_listed_first_but_bypassed_is_no_normalisation(
    tmp_path: Path, bypass: bool
) -> None:
    """A subclassed model's layers list its adapted Normalization first whatever ``call`` does:
    raw wine features (proline up to 1,680) fed past it were taken for normalised, and the
    first step's loss of 174 was blamed on the initialisation. The first Dense's saved
    pre-activation equals the raw input through its kernel: the input is judged raw. Used, the
    normaliser is trusted as before."""
    from sklearn.datasets import load_wine

    wine = load_wine()
    x, y = wine.data.astype("float32"), wine.target
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    norm = keras.layers.Normalization(axis=-1)
    norm.adapt(x)
    model = NormalisedNet(norm, bypass)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(True))
    out = tmp_path / "trial"
    hook = tt.KerasHook(str(out), include_collections=["inputs", "weights", "biases",
                                                       "relu_activations"],
                        save_config=tt.SaveConfig(save_interval=1))  # fmt: skip
    model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[hook])
    hook.close()
    trial = tt.create_trial(str(out))
    assert trial.config()["model"]["first_layer"].endswith("Normalization")
    summary = invoke_rule(UnnormalisedInput(trial))
    if bypass:
        assert summary.status.value == "IssuesFound", summary.details
        assert "the normalisation is bypassed" in summary.findings[0].message
        assert summary.findings[0].details["cause"] == "unnormalised_input"
    else:
        assert summary.status.value == "NoIssuesFound", [f.message for f in summary.findings]
