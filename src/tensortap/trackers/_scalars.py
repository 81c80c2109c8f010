"""A run another tracker recorded, as its scalars: what every reader of a tracker's files
hands on, and which of its tags are the loss, the validation loss and the other metrics.

Which tags count (case aside; ``--loss TAG`` and ``--val-loss TAG`` name others):

- **the training loss** (saved as ``vitals/loss`` at TRAIN steps): the first of
  :data:`TRAIN_LOSS_TAGS` a run holds: ``loss``, ``train/loss``, ``train_loss``,
  ``loss/train``, ``training_loss``, ``train/epoch_loss``, ``batch_loss``, ``epoch_loss``;
- **the validation loss** (``vitals/loss`` at EVAL steps): the first of
  :data:`VALIDATION_LOSS_TAGS` (``val_loss``, ``eval/loss``, ``validation/loss``,
  ``loss/val``, ``test/loss``, ...), or in a series a reader already knows is of evaluation
  (Keras' TensorBoard callback writes ``epoch_loss`` in ``validation/``), a training-loss tag;
- **every other tag** is kept under its own name in the ``metrics`` collection, at EVAL steps
  when its name says it is of evaluation (a path component or prefix ``val``, ``valid``,
  ``validation``, ``eval``, ``evaluation``, ``test``: ``eval/accuracy``, ``val_acc``,
  ``Accuracy/test``), else at TRAIN steps. The runs table's best metric then finds
  ``eval/accuracy`` as it finds a Trainer's.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensortap.core._modes import ModeKeys

#: Bounds on what one import reads: every tracker file is read as hostile.
MAX_FILE_BYTES = 512 * 1024 * 1024  # one event, history, metric or Parquet file
MAX_POINTS = 2_000_000  # values of one run, all its tags together
MAX_TAGS = 10_000  # tags of one run
MAX_RUNS = 10_000  # runs of one source
MAX_TAG_CHARS = 1000  # a tag's length
MAX_PARAMS = 2_000  # parameters of one run kept in its configuration
MAX_PARAM_CHARS = 8192  # a parameter's value, as text
MAX_STEP = (1 << 62) - 1

#: The training loss's tags, the first a run holds wins (compared lower-cased).
TRAIN_LOSS_TAGS = (
    "loss",
    "train/loss",
    "train_loss",
    "loss/train",
    "training_loss",
    "training/loss",
    "train/epoch_loss",
    "batch_loss",
    "epoch_loss",
)
#: The validation loss's tags, the first a run holds wins (compared lower-cased).
VALIDATION_LOSS_TAGS = (
    "val_loss",
    "val/loss",
    "eval/loss",
    "eval_loss",
    "validation/loss",
    "validation_loss",
    "valid/loss",
    "valid_loss",
    "loss/val",
    "loss/validation",
    "loss/eval",
    "test/loss",
    "test_loss",
    "loss/test",
    "validation/epoch_loss",
    "val_epoch_loss",
)
_EVAL_WORDS = frozenset({"val", "valid", "validation", "eval", "evaluation", "test"})
_EVAL_PREFIX = re.compile(r"^(val|valid|validation|eval|evaluation|test)[_\-]", re.IGNORECASE)


def is_evaluation_tag(tag: str) -> bool:
    """Whether a tag's name says it was measured on held-out data (``eval/accuracy``,
    ``val_acc``, ``Accuracy/test``)."""
    parts = tag.lower().replace("\\", "/").split("/")
    return any(p in _EVAL_WORDS for p in parts) or bool(_EVAL_PREFIX.match(parts[0]))


@dataclass
class Series:
    """One tag's values: ``steps`` (int64), ``values`` (float64), ``walls`` (float64 seconds
    since the epoch, NaN where the tracker kept none), in the order recorded. ``mode`` is EVAL
    where the reader knows the series is of evaluation (a Keras ``validation/`` run), else None:
    the tag's name decides."""

    tag: str
    steps: np.ndarray[Any, Any]
    values: np.ndarray[Any, Any]
    walls: np.ndarray[Any, Any]
    mode: ModeKeys | None = None

    @property
    def key(self) -> tuple[str, ModeKeys | None]:
        return self.tag, self.mode


@dataclass
class ScalarRun:
    """One run of another tracker: where it was read, its parameters and its scalar series."""

    name: str  # unique among the runs of one source (a path under it, or the tracker's id)
    source: str  # the file or directory it was read from
    format: str  # tensorboard, mlflow, wandb, neptune (the trial's framework)
    params: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)  # the tracker's run tags (MLflow's)
    #: the values the run was summed up by beside its parameters (TensorBoard's HParams
    #: metrics: the last value of each)
    hparam_metrics: dict[str, float] = field(default_factory=dict)
    #: values of each histogram tag read and not imported (TensorBoard's ``add_histogram``;
    #: at most 1000 tags counted)
    histograms: dict[str, int] = field(default_factory=dict)

    def histograms_left_out(self) -> str | None:
        """The line that says the run's histograms were not imported (None: it holds none)."""
        if not self.histograms:
            return None
        tags, values = len(self.histograms), sum(self.histograms.values())
        return (
            f"{tags} histogram tag{'' if tags == 1 else 's'} ({values} values: "
            f"{', '.join(sorted(self.histograms)[:5])}) not imported: tensortap imports a "
            "tracker's scalars; open the logdir with TensorBoard to see them"
        )

    series: list[Series] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what could not be read of it

    def tag_names(self) -> list[str]:
        return sorted({s.tag for s in self.series})

    def digest(self) -> str:
        """A digest of everything read of the run (its series, parameters, problems): two
        reads with the same digest write the same trial, so a run followed while it is served
        is written again only when it changed (see :mod:`tensortap.trackers._follow`)."""
        digest = hashlib.blake2b(digest_size=16)
        about = [self.name, self.params, self.tags, self.hparam_metrics, self.histograms]
        digest.update(json.dumps([*about, self.problems], sort_keys=True, default=str).encode())
        for series in self.series:
            digest.update(json.dumps([series.tag, series.mode]).encode())
            for array in (series.steps, series.values, series.walls):
                digest.update(len(array).to_bytes(8, "little"))
                digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()


class Collector:
    """Values gathered per (tag, mode) by a reader, bounded: a run past :data:`MAX_TAGS` tags
    or :data:`MAX_POINTS` values keeps what came first and says what it left out."""

    def __init__(self, run: ScalarRun) -> None:
        self.run = run
        self._points: dict[tuple[str, ModeKeys | None], list[tuple[int, float, float]]] = {}
        self._count = 0
        self._full = False
        self._refused_tags: set[str] = set()

    def add(
        self, tag: str, step: Any, value: Any, wall: Any = None, mode: ModeKeys | None = None
    ) -> None:
        """One value; a point that is not a number at a step is left out and said once per
        tag (a tag of strings, a step that is not an integer)."""
        key = (tag, mode)
        points = self._points.get(key)
        if points is None:
            if len(tag) > MAX_TAG_CHARS or not tag.isprintable() or not tag.strip():
                self._refuse(tag, "its name is empty, unprintable or longer than 1000 characters")
                return
            if len(self._points) >= MAX_TAGS:
                self._refuse(tag, f"the run holds more than {MAX_TAGS} tags")
                return
            points = self._points[key] = []
        if self._count >= MAX_POINTS:
            if not self._full:
                self._full = True
                self.run.problems.append(
                    f"{self.run.name}: more than {MAX_POINTS} values; the first {MAX_POINTS} "
                    "are kept"
                )
            return
        number = as_number(value)
        at = as_step(step)
        if number is None or at is None:
            self._refuse(tag, f"a value {value!r} at step {step!r} is not a number at a step")
            return
        when = as_number(wall)
        points.append((at, number, float("nan") if when is None else when))
        self._count += 1

    def _refuse(self, tag: str, why: str) -> None:
        if tag in self._refused_tags or len(self._refused_tags) > 100:
            return
        self._refused_tags.add(tag)
        self.run.problems.append(f"{self.run.name}: tag {tag[:200]!r} left out: {why}")

    def finish(self) -> ScalarRun:
        """The run, its series sorted by step (a stable sort: values logged twice at one step
        stay in the order logged)."""
        for (tag, mode), points in self._points.items():
            if not points:
                continue
            array = np.array(points, dtype=np.float64)
            order = np.argsort(array[:, 0], kind="stable")
            array = array[order]
            self.run.series.append(
                Series(tag, array[:, 0].astype(np.int64), array[:, 1], array[:, 2], mode)
            )
        return self.run


def add_param(run: ScalarRun, key: str, value: Any) -> bool:
    """Keep one parameter of ``run``, bounded: a name that is empty, unprintable or longer
    than :data:`MAX_TAG_CHARS`, a run past :data:`MAX_PARAMS` parameters, or a value that is
    not a string, number or boolean is left out (False; the caller says how many), and a
    string longer than :data:`MAX_PARAM_CHARS` is cut there (said)."""
    if not key.strip() or not key.isprintable() or len(key) > MAX_TAG_CHARS:
        return False
    if key not in run.params and len(run.params) >= MAX_PARAMS:
        return False
    if isinstance(value, str):
        if len(value) > MAX_PARAM_CHARS:
            run.problems.append(
                f"{run.name}: parameter {key[:200]!r} holds {len(value)} characters; the "
                f"first {MAX_PARAM_CHARS} are kept"
            )
            value = value[:MAX_PARAM_CHARS]
    elif not isinstance(value, (bool, int, float)):
        return False
    run.params[key] = value
    return True


def as_number(value: Any) -> float | None:
    """``value`` as a float: a number, or a string holding one; None otherwise (booleans are
    not numbers here). NaN and infinities are kept: a diverged loss is what the rules find."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    if isinstance(value, str) and len(value) <= 64:
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def as_step(value: Any) -> int | None:
    """A step: an integer in [0, 2**62), or a float or decimal string holding one exactly."""
    number = as_number(value)
    if number is None or not np.isfinite(number) or number != int(number):
        return None
    step = int(number)
    return step if 0 <= step <= MAX_STEP else None


@dataclass(frozen=True)
class Roles:
    """Which tags a user named as the loss and the validation loss (None: the documented
    names decide; see the module docstring)."""

    loss: str | None = None
    validation_loss: str | None = None

    def pick(self, run: ScalarRun) -> tuple[Series | None, Series | None, list[str]]:
        """The training loss's and the validation loss's series of ``run`` (None when it has
        none), and the problems of a named tag the run lacks."""
        problems: list[str] = []
        by_lower: dict[str, list[Series]] = {}
        for series in run.series:
            by_lower.setdefault(series.tag.lower(), []).append(series)

        def named(tag: str, mode: ModeKeys | None) -> Series | None:
            for series in by_lower.get(tag.lower(), []):
                if mode is None or series.mode == mode:
                    return series
            return None

        def given(tag: str, what: str, flag: str) -> Series | None:
            found = named(tag, None)
            if found is None:
                problems.append(
                    f"{run.name}: {flag} {tag!r} names no tag of this run (its tags: "
                    f"{', '.join(run.tag_names()[:20]) or 'none'}); its {what} was not found"
                )
            return found

        if self.loss is not None:
            loss = given(self.loss, "training loss", "--loss")
        else:
            loss = next(
                (s for t in TRAIN_LOSS_TAGS for s in by_lower.get(t, []) if s.mode is None),
                None,
            )
        if self.validation_loss is not None:
            validation = given(self.validation_loss, "validation loss", "--val-loss")
        else:
            validation = next(
                (s for t in VALIDATION_LOSS_TAGS for s in by_lower.get(t, []) if s is not loss),
                None,
            )
            if validation is None:  # a loss tag in a series known to be of evaluation
                validation = next(
                    (
                        s
                        for t in TRAIN_LOSS_TAGS
                        for s in by_lower.get(t, [])
                        if s.mode == ModeKeys.EVAL and s is not loss
                    ),
                    None,
                )
        return loss, validation, problems
