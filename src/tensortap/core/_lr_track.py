"""How one optimizer's learning rate went, as seen at its steps, for the training loop's facts
(TrainingLoop judges them): the rate now (``lr/<label>``), the share of its steps taken at a
low rate, at most :data:`LOW_LR` of its peak (``lr_low_share``), the step from which the rate
was low (``lr_low_from``), and its steps at a negative rate (``lr_negative``, from
``lr_negative_from``: each update then climbs the loss). The framework adapters read the rate
(PyTorch from the param groups at ``optimizer.step``; Keras from each batch's vital signs)
and feed it here."""

from __future__ import annotations

from dataclasses import dataclass

#: A learning rate at most this share of its peak counts as "low".
LOW_LR = 0.01


@dataclass
class RateTrack:
    """One optimizer's learning rate, as seen at its steps."""

    lr: float | None = None
    peak: float = 0.0
    low_steps: int = 0
    low_from: int | None = None
    negative_steps: int = 0  # steps taken at a learning rate below 0
    negative_from: int | None = None

    def see(self, lr: float, step: int) -> None:
        """The optimizer took its ``step``-th step at the learning rate ``lr``."""
        self.lr = lr
        if lr < 0:  # every update climbs the loss
            self.negative_steps += 1
            if self.negative_from is None:
                self.negative_from = step
        self.peak = max(self.peak, lr)
        if self.peak > 0 and lr <= LOW_LR * self.peak * (1 + 1e-6):
            self.low_steps += 1
            if self.low_from is None:
                self.low_from = step

    def facts(self, label: str, steps: int) -> dict[str, float]:
        """The facts of the optimizer named ``label`` after ``steps`` steps (none before its
        rate was first seen)."""
        if self.lr is None:
            return {}
        found = {f"lr/{label}": self.lr, f"lr_low_share/{label}": self.low_steps / max(steps, 1)}
        if self.low_from is not None:
            found[f"lr_low_from/{label}"] = self.low_from
        if self.negative_from is not None:
            found[f"lr_negative/{label}"] = self.negative_steps
            found[f"lr_negative_from/{label}"] = self.negative_from
        return found
