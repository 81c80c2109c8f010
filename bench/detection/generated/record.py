"""What a training run records about itself, without tensortap: its own numbers, the ones a
person would print or plot, plus a few the generator measures on a copy of the model."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Metrics:
    """A full validation pass in eval mode, measured by the generator with a proper loss.

    ``quality`` is the number each kind of task is judged by: balanced accuracy for a
    classifier, R² for a regression, 1 - MSE / (the targets' mean square) for an autoencoder.
    """

    loss: float
    quality: float
    accuracy: float = math.nan
    recall: list[float] = field(default_factory=list)  # per class
    #: tanh MLPs: fraction of tanh outputs beyond ±0.99; GRU/LSTM: fraction of the gates'
    #: input pre-activations beyond ±3 (where sigmoid and tanh are flat)
    saturation: float = math.nan

    @property
    def finite(self) -> bool:
        return math.isfinite(self.loss) and math.isfinite(self.quality)


@dataclass
class Evaluation:
    """One evaluation pass of the training loop, with the loop's own loss function."""

    step: int
    loss: float
    accuracy: float = math.nan


@dataclass
class RunRecord:
    """A run, as the run itself saw it."""

    losses: list[float] = field(default_factory=list)  # per optimizer step (micro-batch mean)
    grad_norms: list[float] = field(default_factory=list)  # before each optimizer step
    lrs: list[float] = field(default_factory=list)
    evaluations: list[Evaluation] = field(default_factory=list)
    nonfinite_step: int | None = None  # first step with a NaN/inf loss or gradient
    initial: Metrics | None = None  # before training
    final: Metrics | None = None  # after training
    final_eval_mode: Evaluation | None = None  # the loop's evaluation, redone in eval mode
    unchanged: list[str] = field(default_factory=list)  # trainable parameters never changed
    frozen: list[str] = field(default_factory=list)  # parameters with requires_grad=False
    identical: list[str] = field(default_factory=list)  # weight matrices whose rows all match
    first_update: float = math.nan  # |Δθ| / |θ| of the first optimizer step
    n_train: int = 0
    chance: float = 0.0  # the quality of a model that learned nothing
    seconds: float = 0.0

    @property
    def nonfinite(self) -> bool:
        return self.nonfinite_step is not None

    @property
    def steps(self) -> int:
        return len(self.losses)

    def train_loss(self, at: float = 1.0, width: float = 0.1) -> float:
        """Mean training loss over a window of the run ending at fraction ``at`` of it."""
        n = len(self.losses)
        if not n:
            return math.nan
        end = max(1, round(at * n))
        start = max(0, end - max(1, round(width * n)))
        window = self.losses[start:end]
        return sum(window) / len(window)

    def eval_at(self, at: float) -> Evaluation | None:
        """The loop's evaluation nearest after fraction ``at`` of the run."""
        target = at * max(1, self.steps)
        later = [e for e in self.evaluations if e.step >= target]
        return later[0] if later else (self.evaluations[-1] if self.evaluations else None)

    def summary(self) -> dict[str, Any]:
        """The short form a case.json keeps."""
        return {
            "steps": self.steps,
            "n_train": self.n_train,
            "nonfinite_step": self.nonfinite_step,
            "first_loss": self.losses[0] if self.losses else None,
            "last_loss": self.train_loss(),
            "initial": asdict(self.initial) if self.initial else None,
            "final": asdict(self.final) if self.final else None,
            "evaluations": len(self.evaluations),
            "unchanged": self.unchanged,
            "frozen": self.frozen,
            "seconds": self.seconds,
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunRecord:
        d = dict(d)
        d["evaluations"] = [Evaluation(**e) for e in d["evaluations"]]
        for key in ("initial", "final"):
            d[key] = Metrics(**d[key]) if d[key] else None
        if d["final_eval_mode"]:
            d["final_eval_mode"] = Evaluation(**d["final_eval_mode"])
        return cls(**d)
