"""TrainingLoop's checks of the model's mode: optimizer steps taken on forward passes in
evaluation mode (``train_in_eval_mode``) and evaluation run in train mode
(``eval_in_train_mode``). See :class:`TrainingLoop` for each one's conditions."""

from __future__ import annotations

from collections.abc import Iterator

from tensortap.rules.builtin._loop_facts_view import LoopFacts, LoopVerdict

#: Optimizer steps in eval mode that make a fault (one may end a loop on purpose).
EVAL_MODE_STEPS = 2


class ModeChecks:
    """The train/eval mode checks over ``facts``."""

    def __init__(self, facts: LoopFacts) -> None:
        self._facts = facts

    def train_in_eval_mode(self) -> Iterator[LoopVerdict]:
        count = self._facts.count("eval_mode_steps")
        kinds = self._facts.keys("eval_mode_modules/")
        if count < EVAL_MODE_STEPS or not kinds:
            return
        modules = ", ".join(f"{self._facts.count('eval_mode_modules/' + k)} {k}" for k in kinds)
        steps, since = (
            self._facts.count("optimizer_steps"),
            self._facts.count("eval_mode_steps/step"),
        )
        yield LoopVerdict(
            "train_in_eval_mode",
            f"{count} of the {steps} optimizer steps so far, from step {since}, were taken on "
            f"forward passes in evaluation mode (model.training False), where the model's "
            f"{modules} behave as in evaluation (Dropout drops nothing; BatchNorm normalises "
            "with its running statistics and stops updating them); call model.train() before "
            "the training steps (after each validation pass)",
            count,
            EVAL_MODE_STEPS,
            ("eval_mode_steps", "eval_mode_steps/step"),
        )

    def harmless(self) -> str:
        """Optimizer steps in eval mode that change nothing, said in passing."""
        count = self._facts.count("eval_mode_steps")
        if not count or self._facts.keys("eval_mode_modules/"):
            return ""
        since = self._facts.count("eval_mode_steps/step")
        return (
            f" ({count} optimizer steps, from step {since}, ran with "
            "the model in eval mode, but it has no Dropout or BatchNorm module in eval mode: "
            "that changes nothing)"
        )

    def eval_in_train_mode(self) -> Iterator[LoopVerdict]:
        count = self._facts.count("eval_in_train_mode")
        if count < 2:
            return
        kinds = self._facts.keys("train_mode_modules/")
        modules = ", ".join(f"{self._facts.count('train_mode_modules/' + k)} {k}" for k in kinds)
        single = self._facts.count("eval_in_train_mode/single_batch")
        alone = f" ({single} of them single batches between training steps)" if single else ""
        dropout_on = self._facts.count("eval_in_train_mode/dropout_on")
        how = (
            f"while model.training was True ({dropout_on} of them with the model in eval mode "
            "but its Dropout switched back to training)"
            if 0 < dropout_on < count
            else "with the model in eval mode but its Dropout switched back to training "
            "(a Monte Carlo dropout helper, or .train() on the Dropout modules, after "
            "model.eval)"
            if dropout_on
            else "while model.training was True"
        )
        yield LoopVerdict(
            "eval_in_train_mode",
            f"evaluation runs in train mode: {count} forward passes{alone} ran under "
            f"torch.no_grad() {how}, with {modules or 'modules'} behaving as in "
            "training (Dropout drops units, BatchNorm normalises with the batch's statistics "
            "and updates its running averages); put the model in eval mode before evaluating "
            "(model.eval, the same as model.train(False)), leave its Dropout modules in it, and "
            "go back with model.train() after",
            count,
            2,
            ("eval_in_train_mode",),
        )
