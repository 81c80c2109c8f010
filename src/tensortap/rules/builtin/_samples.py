"""The model's own input at a saved step, and how many distinct samples training went through.

The rows of the model's input saved at training steps are fingerprinted; the repeats among
them estimate the size of the training set the way a capture-recapture count does: drawing
``n`` rows from a set of ``N``, about ``N * (1 - exp(-n / N))`` of them are distinct.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from tensortap.core._outcome import FUNCTIONAL_REGRESSION_LOSSES
from tensortap.rules._numbers import DOUBT, Numbers
from tensortap.rules.builtin._common import has_raw, optional_names_in
from tensortap.trials._records import any_at, saved_records

if TYPE_CHECKING:
    from tensortap.trials._trial import Trial

T = TypeVar("T")


def model_input(trial: Trial, step: int) -> tuple[str, np.ndarray] | None:
    """The model's own input saved at ``step`` (the first tensor of the ``inputs`` collection
    in forward order) with its value, or None where none was saved in full. An optional read:
    a trial without inputs is not told to save them."""
    inputs = set(optional_names_in(trial, "inputs", step))
    if not inputs:  # nothing to look for in the step's order (which reads the step)
        return None
    losses = set(optional_names_in(trial, "losses", step))
    for name in trial.saved_order(step):
        if name in inputs and not _of_a_loss(name, losses) and has_raw(trial.tensor(name), step):
            return name, trial.tensor(name).value(step)
    return None


class ModelInputs(Numbers["tuple[str, np.ndarray] | None"]):
    """The model's own input at a step (:func:`model_input`), read while ``wanted()``. In
    bulk, a step that saved inputs is read live (raw values, which the series do not hold);
    the others have none."""

    def __init__(self, wanted: Callable[[], bool]) -> None:
        super().__init__()
        self.wanted = wanted

    def read(self, step: int) -> tuple[str, np.ndarray] | None:
        return model_input(self.trial, step)

    def count(self, numbers: tuple[str, np.ndarray] | None) -> int:
        return 0 if numbers is None else 1

    def gather(self, steps: np.ndarray) -> Iterator[tuple[str, np.ndarray] | Any | None]:
        trial = self.trial
        inputs = optional_names_in(trial, "inputs") if self.wanted() else []
        if not inputs:
            return itertools.repeat(None, len(steps))
        saved = any_at(steps, saved_records(trial, inputs).step).tolist()
        return (DOUBT if at else None for at in saved)


_MODULE_INPUT = re.compile(r"^(?P<module>.+?)_input_\d+$")


def _of_a_loss(name: str, losses: set[str]) -> bool:
    """Whether ``name`` is an input of a loss module (one whose output is in the ``losses``
    collection) or of a functional regression loss (``mse_loss_input_0``): a model called with
    keyword arguments only (a Hugging Face model under its Trainer) saves no input of its own,
    and its loss's first input, the logits, is no input of the model's."""
    match = _MODULE_INPUT.match(name)
    if match is None:
        return False
    module = match.group("module")
    return module in FUNCTIONAL_REGRESSION_LOSSES or f"{module}_output_0" in losses


#: Layers that normalise what they are given (per feature or channel, from statistics of the
#: data): a model that meets its input with one normalises it itself.
INPUT_NORMALISERS = frozenset(
    {
        "Normalization",  # Keras, adapted to the training data
        "BatchNormalization",
        "LayerNormalization",
        "BatchNorm1d",
        "BatchNorm2d",
        "BatchNorm3d",
        "LayerNorm",
        "GroupNorm",
        "InstanceNorm1d",
        "InstanceNorm2d",
    }
)


#: Layers that look their input up (token ids, categories): a model that meets its input with
#: one is given ids, whose size says nothing of normalisation.
INPUT_LOOKUPS = frozenset(
    {
        "Embedding",  # Keras and PyTorch
        "EmbeddingBag",
        "StringLookup",
        "IntegerLookup",
        "CategoryEncoding",
        "Hashing",
        "TextVectorization",
    }
)


def _first_layer(trial: Trial) -> str | None:
    """The class name (without its module) of the model's first layer, from the run's
    configuration (``model.first_layer``); None where it was not recorded."""
    try:
        model = trial.config().get("model")
    except Exception:  # an unreadable configuration is listed by the trial, not judged here
        return None
    first = model.get("first_layer") if isinstance(model, dict) else None
    return first.rsplit(".", 1)[-1] if isinstance(first, str) else None


def normalised_in_model(trial: Trial) -> str | None:
    """Why the model's raw input is what its author meant, from its first layer (the run's
    configuration, ``model.first_layer``), else None: raw features fed to a Keras model that
    starts with an adapted Normalization layer, or token ids fed to an Embedding."""
    short = _first_layer(trial)
    if short in INPUT_NORMALISERS:
        return f"the model's first layer ({short}) normalises its input itself"
    if short in INPUT_LOOKUPS:
        return f"the model's first layer ({short}) looks its input up: ids, not features"
    return None


#: The first weight layer met the raw input when its saved pre-activation is within this
#: (relative, in norm) of the raw input through its kernel and bias: fed the raw input, a Keras
#: Dense's pre-activation agrees to 0.4% (its kernel saved after the batch's update), fed the
#: normalised one it is off by orders of magnitude.
_RAW_AGREES = 0.05
_PRE_ACTIVATION = re.compile(r"^(?P<layer>.+)/[A-Za-z0-9_]+_input_0$")


def raw_input_reaches(trial: Trial, step: int, x: np.ndarray) -> str | None:
    """Where the model's raw 2-D input ``x`` (saved at ``step``) reaches a weight layer
    unchanged although the model's first layer normalises (a subclassed model whose ``call``
    feeds ``x`` past its adapted Normalization: its layers list the normaliser first, whatever
    ``call`` does): which layer shows it, else None. Read from a Keras layer's saved
    pre-activation (``<layer>/<activation>_input_0``), its ``<layer>/kernel`` (features x
    units) and ``<layer>/bias``, at the same step; None where they were not saved."""
    if x.ndim != 2 or not x.shape[0]:
        return None
    kernels = [n for n in optional_names_in(trial, "weights", step) if n.endswith("/kernel")]
    if not kernels:
        return None
    saved = trial.saved_order(step)
    for name in saved:
        match = _PRE_ACTIVATION.match(name)
        layer = match.group("layer") if match else None
        if layer is None or f"{layer}/kernel" not in kernels:
            continue
        kernel, tap = trial.tensor(f"{layer}/kernel"), trial.tensor(name)
        if not (has_raw(kernel, step) and has_raw(tap, step)):
            continue
        weights = kernel.value(step).astype(np.float64)
        z = tap.value(step).astype(np.float64)
        if weights.shape[:1] != x.shape[1:] or z.shape != (x.shape[0], weights.shape[-1]):
            continue
        raw = x.astype(np.float64) @ weights.reshape(x.shape[1], -1)
        bias = f"{layer}/bias"
        if bias in saved and has_raw(trial.tensor(bias), step):
            raw = raw + trial.tensor(bias).value(step).astype(np.float64).reshape(1, -1)
        scale = float(np.linalg.norm(z))
        if scale and float(np.linalg.norm(z - raw)) <= _RAW_AGREES * scale:
            return layer
    return None


def input_rescaling(trial: Trial) -> tuple[float, float] | None:
    """(scale, offset) of the model's first layer where it rescales its input (Keras'
    ``Rescaling``, from the run's configuration, ``model.first_layer_rescaling``): the input
    rules judge ``x * scale + offset``, what the next layer meets; None where none was
    recorded."""
    try:
        model = trial.config().get("model")
    except Exception:  # an unreadable configuration is listed by the trial, not judged here
        return None
    found = model.get("first_layer_rescaling") if isinstance(model, dict) else None
    if not isinstance(found, dict):
        return None
    scale, offset = found.get("scale"), found.get("offset", 0.0)
    numbers = all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        for v in (scale, offset)
    )
    return (float(scale), float(offset)) if numbers and scale else None


#: Model classes (without their module) that predict tokens: the Hugging Face heads of
#: causal, masked and sequence-to-sequence language models
_TOKEN_HEADS = ("LMHeadModel", "ForCausalLM", "ForMaskedLM", "ForConditionalGeneration")


def predicts_tokens(trial: Trial) -> str | None:
    """Why the run's labels are a vocabulary's tokens, not classes, from the model's class (the
    run's configuration, ``model.class``), else None."""
    try:
        model = trial.config().get("model")
    except Exception:  # an unreadable configuration is listed by the trial, not judged here
        return None
    name = model.get("class") if isinstance(model, dict) else None
    short = name.rsplit(".", 1)[-1] if isinstance(name, str) else ""
    if short.endswith(_TOKEN_HEADS):
        return f"the model ({short}) predicts tokens of a vocabulary"
    return None


class ConfigFact(Generic[T]):
    """``find(trial)``, a fact of the run's configuration, for a rule that asks at each step: read
    until a configuration was recorded (a hook records it when training starts), then kept."""

    def __init__(self, trial: Trial, find: Callable[[Trial], T | None]) -> None:
        self.trial = trial
        self._find = find
        self._found: T | None = None
        self._settled = False

    def __call__(self) -> T | None:
        if not self._settled:
            self._found = self._find(self.trial)
            try:
                self._settled = bool(self.trial.config())
            except Exception:  # an unreadable configuration: asked again at the next step
                self._settled = False
        return self._found


class DistinctSamples:
    """Counts the rows (samples) of saved training inputs and the distinct ones among them.

    It stops fingerprinting once ``cap`` distinct rows were seen (the set is then not small,
    and the cost of reading large inputs stays bounded); ``estimate`` is None from then on.
    """

    #: each sample is seen this many times on average before the count is believed: a set
    #: of N drawn 3N times leaves a set larger than the distinct rows less than 5% unseen
    FIRM = 3

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.seen = 0
        self._rows: set[bytes] = set()
        self.full = False

    @property
    def distinct(self) -> int:
        return len(self._rows)

    def add(self, value: np.ndarray) -> None:
        if self.full or value.ndim < 1 or not value.size:
            return
        rows = np.ascontiguousarray(value).reshape(value.shape[0], -1)
        for row in rows:
            self._rows.add(hashlib.blake2b(row.tobytes(), digest_size=8).digest())
        self.seen += rows.shape[0]
        if len(self._rows) > self.cap:
            self.full, self._rows = True, set()

    def estimate(self) -> float | None:
        """The training set's size estimated from the repeats, once firm; None before that
        or once more than ``cap`` distinct samples were seen."""
        d, n = self.distinct, self.seen
        if self.full or not d or n < self.FIRM * d:
            return None
        return _population(n, d)


class DistinctByClass:
    """The distinct samples (rows of the saved training inputs) of each class, from the
    labels saved beside them, while there are at most ``cap`` in all; a class's count of
    labels seen counts a sample again each time it is drawn, which on a small training set
    makes a chance difference of a few samples look like a large imbalance."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._rows: dict[int, set[bytes]] = {}
        self.full = False

    def add(self, value: np.ndarray, labels: np.ndarray) -> None:
        if self.full or value.ndim < 1 or value.shape[0] != labels.size or not labels.size:
            return
        rows = np.ascontiguousarray(value).reshape(value.shape[0], -1)
        for row, label in zip(rows, labels.ravel().tolist(), strict=True):
            digest = hashlib.blake2b(row.tobytes(), digest_size=8).digest()
            self._rows.setdefault(int(label), set()).add(digest)
        if sum(map(len, self._rows.values())) > self.cap:
            self.full, self._rows = True, {}

    def counts(self, size: int) -> np.ndarray | None:
        """Distinct samples by class (``size`` classes at least), or None where none were
        counted or more than ``cap`` were."""
        if self.full or not self._rows:
            return None
        counts = np.zeros(max(size, max(self._rows) + 1), dtype=np.int64)
        for label, rows in self._rows.items():
            counts[label] = len(rows)
        return counts


def _population(n: int, d: int) -> float:
    """The N for which ``n`` draws with replacement are expected to give ``d`` distinct."""
    lo, hi = float(d), float(d)
    while hi * -math.expm1(-n / hi) < d - 1e-9:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        if mid * -math.expm1(-n / mid) < d:
            lo = mid
        else:
            hi = mid
    return hi
