"""TrainingLoop's checks of what the loss is computed from and how backward passes add up:
gradient accumulation left undivided (``accumulation_undivided``), a prediction and target
that broadcast (``loss_shape_mismatch``), probabilities fed to a loss that expects logits
(``softmax_before_loss``). See :class:`TrainingLoop` for each one's conditions."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tensortap.rules.builtin._loop_facts_view import LoopFacts, LoopVerdict


class LossChecks:
    """The loss and accumulation checks over ``facts``; ``accumulation_steps``: optimizer
    steps with undivided micro-batches that make a fault."""

    def __init__(self, facts: LoopFacts, *, accumulation_steps: int) -> None:
        self._facts = facts
        self.accumulation_steps = accumulation_steps

    def undivided(self) -> Iterator[LoopVerdict]:
        retained = self._facts.count("accumulation_retained")
        if retained > 0:
            k = self._facts.count("accumulation_retained/micro_batches")
            yield LoopVerdict(
                "accumulation_undivided",
                f"a backward pass ran through the graph of an earlier backward pass of the same "
                f"optimizer step ({retained} of the steps checked, {k} backward passes each): "
                "backward() on a running total of the micro-batches' losses (kept with "
                "retain_graph=True) counts each earlier micro-batch's gradient again, so the "
                "step is several times what the batches give; call backward() on each "
                "micro-batch's own loss (divided by their number), or once on the total",
                float(retained),
                1,
                ("accumulation_retained", "accumulation_retained/micro_batches"),
            )
            return
        summed = self._facts.count("accumulation_summed")
        if summed >= self.accumulation_steps:
            k = self._facts.count("accumulation_summed/micro_batches")
            yield LoopVerdict(
                "accumulation_undivided",
                f"one backward pass ran on the sum of {k} losses, each from its own forward "
                f"pass of the model over its own batch ({summed} of the optimizer steps checked): "
                f"a running total of the micro-batches' losses, undivided, so the step is {k}x "
                f"what one batch gives; divide the total by {k} (or each loss) before backward()",
                float(summed),
                self.accumulation_steps,
                ("accumulation_summed", "accumulation_summed/micro_batches"),
            )
            return
        steps = self._facts.count("accumulation_undivided")
        if steps < self.accumulation_steps:
            return
        k = self._facts.count("accumulation_undivided/micro_batches")
        yield LoopVerdict(
            "accumulation_undivided",
            f"gradients are accumulated over {k} backward passes per optimizer step, each on the "
            f"whole loss, undivided ({steps} optimizer steps so far): the step is {k}x what "
            f"one batch gives; divide the loss by {k} before backward()",
            float(steps),
            self.accumulation_steps,
            ("accumulation_undivided", "accumulation_undivided/micro_batches"),
        )

    def loss_inputs(self) -> Iterator[LoopVerdict]:
        for loss in self._facts.keys("loss_shape_mismatch/"):
            if not loss.endswith("/input"):
                continue
            loss = loss[: -len("/input")]
            given = self._facts.latest.get(f"loss_shape_mismatch/{loss}/input")
            target = self._facts.latest.get(f"loss_shape_mismatch/{loss}/target")
            if given is None or target is None:
                continue
            a, b = tuple(int(v) for v in given.ravel()), tuple(int(v) for v in target.ravel())
            yield LoopVerdict(
                "loss_shape_mismatch",
                f"{loss} compares a prediction of shape {a} with a target of shape {b}: they "
                f"broadcast to {tuple(np.broadcast_shapes(a, b))}, so each prediction is "
                "compared with every target and the loss is wrong; give both the same shape "
                "(e.g. prediction.squeeze(-1), or target.unsqueeze(-1))",
                float(np.prod(np.broadcast_shapes(a, b))) / max(float(np.prod(a)), 1.0),
                1,
                ("loss_shape_mismatch",),
            )
            break
        for loss in self._facts.keys("softmax_before_loss/"):
            expects = "log-probabilities (log_softmax)" if "NLL" in loss else "logits"
            yield LoopVerdict(
                "softmax_before_loss",
                f"{loss} is fed probabilities (every row non-negative and summing to 1): a "
                f"softmax comes before a loss that expects {expects}, which flattens its "
                f"gradients and slows or stalls training; feed it {expects} instead",
                1,
                0,
                ("softmax_before_loss",),
            )
            break
