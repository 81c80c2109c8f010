"""TrainingLoop's checks of the learning rate: its sign, or the loss's (``wrong_sign``), how
far the first optimizer step moved the weights (``lr_too_high``, ``lr_too_low``) and a
schedule stepped per batch that runs out early (``scheduler_per_batch``). See
:class:`TrainingLoop` for each one's conditions."""

from __future__ import annotations

import statistics
from collections.abc import Iterator

import numpy as np

from tensortap.rules.builtin._loop_facts_view import LoopFacts, LoopVerdict

#: Optimizers whose first step moves every weight by about its learning rate (lr * sign(g));
#: RMSprop's and Adagrad's first step is ten times the Adam family's.
_ADAM_LIKE = frozenset({"Adam", "AdamW", "Adamax", "NAdam", "RAdam"})
_ADAPTIVE = _ADAM_LIKE | {"RMSprop", "Adagrad"}
#: An Adam-family first update from this share of ``adam_first_update_threshold`` is evidence
#: of a learning rate too high (needs harm); from the threshold on, a certain fault.
_ADAM_FIRST_UPDATE_EVIDENCE = 0.6
#: Backward passes on a negated loss that make a fault, in a loop with one optimizer (a GAN's
#: generator may climb its discriminator's loss on purpose).
_NEGATED_PASSES = 2


class RateChecks:
    """The learning-rate checks over ``facts``, with TrainingLoop's settings."""

    def __init__(
        self,
        facts: LoopFacts,
        *,
        min_steps: int,
        first_update_threshold: float,
        adam_first_update_threshold: float,
        low_lr_share: float,
        low_first_update: float,
    ) -> None:
        self._facts = facts
        self.min_steps = min_steps
        self.first_update_threshold = first_update_threshold
        self.adam_first_update_threshold = adam_first_update_threshold
        self.low_lr_share = low_lr_share
        self.low_first_update = low_first_update

    def wrong_sign(self) -> Iterator[LoopVerdict]:
        for label in self._facts.keys("lr_negative/"):
            if "/" in label or self._facts.count("lr_negative/" + label) <= 0:
                continue
            steps = self._facts.count("lr_negative/" + label)
            first = self._facts.count("lr_negative_from/" + label)
            now = self._facts.num("lr/" + label)
            yield LoopVerdict(
                "wrong_sign",
                f"the learning rate of {label} is negative ({now:g} now; "
                f"{steps} optimizer step{'s' if steps != 1 else ''} below 0 from step {first}): "
                "each update climbs the loss; check the schedule's formula (a decay written "
                "(step - total) / total) and the rate's sign",
                steps,
                0,
                ("lr_negative/" + label,),
            )
            return
        negated = self._facts.count("loss_negated")
        alone = len(self._facts.keys("steps/")) <= 1 and not self._facts.count(
            "other_optimizer_steps"
        )  # one optimizer: nothing in the loop climbs a loss on purpose
        if negated >= _NEGATED_PASSES and alone:
            yield LoopVerdict(
                "wrong_sign",
                f"{negated} backward passes ran on the loss with its sign flipped (-loss: the "
                "output of a loss module or loss function, negated): each update climbs the "
                "loss; minimise the loss itself (cross-entropy and NLL already carry their "
                "minus sign)",
                negated,
                _NEGATED_PASSES,
                ("loss_negated",),
            )
            return
        for label in self._facts.keys("maximize/"):
            if not self._facts.count("maximize/" + label):
                continue
            yield LoopVerdict(
                "wrong_sign",
                f"{label} is built with maximize=True: it climbs the loss it is given; pass "
                "maximize=False to minimise a loss (or negate a score before backward())",
                1,
                0,
                ("maximize/" + label,),
                needs_harm=True,  # maximising a reward on purpose is not a fault alone
            )
            return

    def first_update(self) -> Iterator[LoopVerdict]:
        per = {
            k: self._facts.num("first_update_ratio/" + k)
            for k in self._facts.keys("first_update_ratio/")
        }
        # the weights the first step moved: one that stayed exactly where it was got no
        # gradient (units dead below it, a dropout of 1), which no learning rate explains
        # (recorded trials leave such weights out; older ones kept them, at 0)
        moved = [v for v in per.values() if v > 0]
        if per and not moved:
            return
        ratio = statistics.median(moved) if moved else self._facts.num("first_update_ratio")
        adaptive = [k for k in self._facts.keys("lr/") if k.split("_")[0] in _ADAPTIVE]
        # judged once min_steps optimizer steps show no warm-up has raised the rate since
        warmed = any(
            self._facts.num("lr/" + k) > 1.01 * float(self._facts.first.get("lr/" + k, np.nan))
            for k in adaptive
        )
        if (
            adaptive
            and len(adaptive) == len(self._facts.keys("lr/"))
            and ratio < self.low_first_update
            and self._facts.count("optimizer_steps") >= self.min_steps
            and not warmed
        ):
            # an adaptive optimizer's first step moves each weight by about its learning rate:
            # the ratio is the learning rate over the weights' scale, whatever the gradients
            lrs = ", ".join(f"{k} {self._facts.num('lr/' + k):g}" for k in adaptive)
            yield LoopVerdict(
                "lr_too_low",
                f"the first optimizer step moved the weights by a median {ratio:.3g} times their "
                f"norm (an adaptive optimizer's first step is its learning rate over the weights' "
                f"scale; healthy runs start at 5e-4 and above): the learning rate ({lrs}) is far "
                "too low for this model; raise it",
                ratio,
                self.low_first_update,
                ("first_update_ratio",),
            )
            return
        labels = self._facts.keys("lr/")
        adam_like = bool(labels) and all(k.split("_")[0] in _ADAM_LIKE for k in labels)
        limit = self.adam_first_update_threshold if adam_like else self.first_update_threshold
        # Adam's first step moves each weight by its learning rate: from 0.6 of the weights'
        # scale it is evidence, a problem where the run is harmed (healthy runs of the
        # generated development split reach 0.23; a transformer at 100x its rate, 0.84), in
        # a network: a linear model's loss is convex, and a healthy logistic regression on
        # Adam at 0.05 starts at 0.69 (docs/rules.md, WeightUpdateRatio)
        evidence = adam_like and len(moved) >= 2 and ratio >= _ADAM_FIRST_UPDATE_EVIDENCE * limit
        if not (ratio >= limit or evidence):  # NaN (never measured) included
            return
        worst = sorted(per.items(), key=lambda kv: -kv[1])[:3]
        lrs = ", ".join(f"{k} {self._facts.num('lr/' + k):g}" for k in self._facts.keys("lr/"))
        healthy = "0.23" if adam_like else "0.5"
        yield LoopVerdict(
            "lr_too_high",
            f"the first optimizer step moved the weights by a median {ratio:.3g} times their "
            f"norm ({', '.join(f'{k} {v:.3g}' for k, v in worst)}; healthy first updates are "
            f"1e-4 to {healthy} of the weights): the learning rate ({lrs}) is "
            f"{'far ' if ratio >= limit else ''}too high for this model; lower it, or warm it "
            "up (with plain SGD, exploding gradients do the same: see ExplodingTensor)",
            ratio,
            limit if ratio >= limit else _ADAM_FIRST_UPDATE_EVIDENCE * limit,
            ("first_update_ratio",),
            needs_harm=not ratio >= limit,
        )

    def scheduler(self) -> Iterator[LoopVerdict]:
        for key in self._facts.keys("scheduler_per_step/"):
            per = self._facts.num("scheduler_per_step/" + key)
            if not per >= 0.5:
                continue  # stepped per epoch (or less often than per batch)
            label, scheduler = key.split("/", 1)
            steps = self._facts.count("steps/" + label)
            share = self._facts.num("lr_low_share/" + label, 0.0)
            period = self._facts.num("scheduler_period/" + key)
            stepped = self._facts.count("scheduler_steps/" + key)
            span = f" (period {period:g})" if period == period else ""
            if steps >= self.min_steps and share >= self.low_lr_share:
                low_from = self._facts.count("lr_low_from/" + label)
                fell = (
                    f"the learning rate of {label} fell to 1% of its peak by step {low_from}, "
                    f"staying there for {share:.0%} of the {steps} steps seen"
                )
                if self._facts.count("scheduler_counts_steps/" + key):  # a Keras schedule, say
                    message = (
                        f"{scheduler}{span} counts optimizer steps (batches), not epochs, and "
                        f"{fell}: if its period is meant in epochs, multiply it by the batches "
                        "per epoch (or set the rate per epoch with a LearningRateScheduler "
                        "callback)"
                    )
                else:
                    message = (
                        f"{scheduler}{span} is stepped once per batch ({per:.2f} scheduler "
                        f"steps per optimizer step) and {fell}; its period counts "
                        "scheduler.step() calls: if it is in epochs, call scheduler.step() "
                        "once per epoch (or give the period in batches)"
                    )
                yield LoopVerdict(
                    "scheduler_per_batch",
                    message,
                    share,
                    self.low_lr_share,
                    ("lr_low_share/" + label, "scheduler_per_step/" + key),
                )
                return
            if scheduler == "CosineAnnealingLR" and period > 0 and stepped > 2 * period:
                yield LoopVerdict(
                    "scheduler_per_batch",
                    f"CosineAnnealingLR(T_max={period:g}) was stepped {stepped} times, once per "
                    "batch: past T_max its cosine climbs back up, so the learning rate of "
                    f"{label} has gone down and up {stepped / (2 * period):.1f} times; T_max "
                    "counts scheduler.step() calls: step it once per epoch, or set T_max to "
                    "the total number of batches",
                    stepped / period,
                    2,
                    ("scheduler_steps/" + key, "scheduler_per_step/" + key),
                )
                return
