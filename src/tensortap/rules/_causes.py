"""What can be wrong with a training run: one vocabulary of causes, each with what it explains.

A rule's triggered finding names a cause (``details["cause"]``, or its rule's usual cause).
Causes come in tiers: facts about the training loop are certain (tier 0); faults of the set-up
(data, initialisation, learning rate) come next (tier 1), then what training does over time
(tier 2); symptoms (tier 3) are what the tensors show whatever the cause. A cause *explains*
the causes and symptoms that follow from it, which is how :mod:`tensortap.rules._verdict`
folds consequences under their cause.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Cause:
    """One thing that can be wrong: ``title`` names it for a person, ``fix`` says what to try,
    ``explains`` lists the causes that follow from it."""

    id: str
    title: str
    tier: int
    fix: str
    explains: frozenset[str] = frozenset()

    @property
    def symptom(self) -> bool:
        """Whether this is a symptom (what tensors show) rather than a root cause."""
        return self.tier >= SYMPTOM_TIER


#: Facts about the training loop (certain), set-up faults, training over time, symptoms.
LOOP_TIER, SETUP_TIER, DYNAMICS_TIER, SYMPTOM_TIER = 0, 1, 2, 3

_DIVERGENCE = ("nonfinite", "exploding_gradient", "diverging", "loss_spike")
_STALL = ("no_progress", "underfitting", "not_updating", "lr_too_low", "overtraining")
_UNITS = ("dead_relu", "saturated_activation", "vanishing_gradient", "all_zero")


def _cause(id: str, title: str, tier: int, fix: str, *explains: str) -> Cause:
    return Cause(id, title, tier, fix, frozenset(explains))


_ALL = (
    # -- the training loop itself: certain answers --
    _cause(
        "params_not_in_optimizer",
        "parameters are left out of the optimizer",
        LOOP_TIER,
        "build the optimizer over every parameter that should train "
        "(model.parameters(), or add the missing ones as a param group)",
        *_STALL,
        "vanishing_gradient",
        "no_learnable_signal",
    ),
    _cause(
        "frozen_layer",
        "a layer that has to learn is frozen",
        LOOP_TIER,
        "let the layers that must learn train (requires_grad=True in PyTorch, layer.trainable "
        "= True in Keras; a model's output layer always must), and build the optimizer over "
        "them",
        *_STALL,
        "vanishing_gradient",
        "no_learnable_signal",
    ),
    _cause(
        "gradient_blocked",
        "no gradient reaches the weights (the graph is cut between them and the loss)",
        LOOP_TIER,
        "find where the loss loses its connection to the model: a .detach(), .data, .item() "
        "or numpy round trip, torch.no_grad(), an argmax or rounding in the graph, or a loss "
        "rebuilt with requires_grad_(); compute the loss from the model's output tensor",
        *_STALL,
        "vanishing_gradient",
        "all_zero",
        "no_learnable_signal",
    ),
    _cause(
        "optimizer_not_stepping",
        "the optimizer never updates the weights",
        LOOP_TIER,
        "call optimizer.step() after loss.backward() in every training step",
        *_STALL,
        "vanishing_gradient",
        "poor_init",
        "no_learnable_signal",
    ),
    _cause(
        "grads_not_cleared",
        "gradients are never cleared between steps",
        LOOP_TIER,
        "call optimizer.zero_grad() once per optimizer step",
        *_DIVERGENCE,
        *_UNITS,
        "lr_too_high",
        "no_progress",
        "underfitting",
        "not_updating",
        "overfitting",
        "overtraining",
        "no_learnable_signal",
    ),
    _cause(
        "accumulation_undivided",
        "accumulated gradients are summed, not averaged",
        LOOP_TIER,
        "divide each micro-batch's loss by the number of micro-batches before backward()",
        *_DIVERGENCE,
        *_UNITS,
        "lr_too_high",
        "no_progress",
        "underfitting",
        "overfitting",
        "no_learnable_signal",
    ),
    _cause(
        "eval_in_train_mode",
        "evaluation runs in training mode",
        LOOP_TIER,
        "put the model in evaluation mode (model.eval) before evaluating and back in training "
        "mode (model.train) after: dropout and BatchNorm behave differently in training mode",
        "overfitting",
        "overtraining",
        "no_progress",
        "underfitting",
    ),
    _cause(
        "train_in_eval_mode",
        "the model trains in evaluation mode (model.eval left on)",
        LOOP_TIER,
        "call model.train() before training steps (after each validation pass): in evaluation "
        "mode dropout is off and BatchNorm neither uses nor updates the batch's statistics",
        "overfitting",
        "overtraining",
        "no_progress",
        "underfitting",
        "loss_spike",
        "diverging",
    ),
    _cause(
        "scheduler_per_batch",
        "the learning-rate schedule runs out within the first epochs",
        LOOP_TIER,
        "step an epoch-based scheduler once per epoch, or give it a period in steps",
        *_STALL,
        "vanishing_gradient",
        "overfitting",
        "no_learnable_signal",
    ),
    _cause(
        "softmax_before_loss",
        "softmax is applied before a loss that applies it itself",
        LOOP_TIER,
        "feed raw logits to nn.CrossEntropyLoss (it applies log-softmax itself); drop the "
        "softmax from the model's output",
        *_STALL,
        "vanishing_gradient",
        "saturated_activation",
        "overfitting",
        "no_learnable_signal",
    ),
    _cause(
        "loss_shape_mismatch",
        "the loss compares tensors of different shapes (a broadcast bug)",
        LOOP_TIER,
        "make the output and the target the same shape (e.g. output.squeeze(-1) or "
        "target.unsqueeze(-1)) before the loss",
        *_STALL,
        "overfitting",
        "vanishing_gradient",
        "no_learnable_signal",
    ),
    # -- the set-up --
    _cause(
        "unnormalised_input",
        "the inputs are not normalised",
        SETUP_TIER,
        "scale the inputs (images to [0, 1] or standardised; tabular features standardised "
        "with the training set's mean and standard deviation)",
        *_DIVERGENCE,
        *_UNITS,
        "lr_too_high",
        "poor_init",
        "no_progress",
        "underfitting",
        "not_updating",
        "overtraining",
        "overfitting",
        "no_learnable_signal",
    ),
    _cause(
        "poor_init",
        "the weights are badly initialised",
        SETUP_TIER,
        "use the framework's default initialisation (Kaiming/He for ReLU, Xavier/Glorot for "
        "tanh/sigmoid); never all-zero or constant weights, which make units identical",
        *_DIVERGENCE,
        *_UNITS,
        *_STALL,
        "lr_too_high",
        "overfitting",
        "no_learnable_signal",
    ),
    _cause(
        "lr_too_high",
        "the learning rate is too high",
        SETUP_TIER,
        "lower the learning rate (try 10x lower), or warm it up; clip gradients if spikes remain",
        *_DIVERGENCE,
        *_UNITS,
        "no_progress",
        "underfitting",
        "not_updating",
        "overfitting",
        "overtraining",
        "poor_init",
        # a burst that kills the units leaves the model answering at chance (a stranger's
        # Adam at 3e-1: loss 1.8 to 626 in 5 steps, then every ReLU dead and accuracy at chance)
        "no_learnable_signal",
    ),
    _cause(
        "wrong_sign",
        "each update climbs the loss instead of descending it (a flipped sign)",
        SETUP_TIER,
        "minimise the loss: call loss.backward() (not (-loss).backward()), leave the "
        "optimizer's maximize=False, and negate a score or reward that is to be maximised "
        "before backward()",
        *_DIVERGENCE,
        *_UNITS,
        "lr_too_high",
        "poor_init",
        "no_progress",
        "underfitting",
        "not_updating",
        "overfitting",
        "overtraining",
        "no_learnable_signal",
    ),
    _cause(
        "lr_too_low",
        "the learning rate is too low",
        SETUP_TIER,
        "raise the learning rate (try 10x higher) or use an adaptive optimizer such as Adam",
        "no_progress",
        "underfitting",
        "not_updating",
        "overtraining",
        "no_learnable_signal",
    ),
    _cause(
        "class_imbalance",
        "the classes are imbalanced and training does not handle it",
        SETUP_TIER,
        "weight the loss by inverse class frequency, resample the training set, or judge by "
        "per-class recall",
        "class_given_up",
        "no_progress",
        "underfitting",
        "overfitting",
        "overtraining",
        "no_learnable_signal",
    ),
    _cause(
        "small_training_set",
        "the training set is too small: the model memorises it",
        SETUP_TIER,
        "train on more samples (check that a debugging subset or a wrong split was not left "
        "in), augment the data, or use a smaller model with more regularisation",
        "overfitting",
        "overtraining",
        "class_given_up",
        "no_learnable_signal",
    ),
    _cause(
        "no_learnable_signal",
        "the labels do not follow from the inputs (shuffled or wrong labels)",
        SETUP_TIER,
        "check that inputs and labels stay paired through loading, shuffling and augmentation",
        "no_progress",
        "underfitting",
        "overfitting",
        "overtraining",
    ),
    # -- training over time --
    _cause(
        "overfitting",
        "the model overfits its training data",
        DYNAMICS_TIER,
        "use more training data or augmentation, regularise (dropout, weight decay), or stop "
        "at the best validation loss",
        "overtraining",
    ),
    _cause(
        "overtraining",
        "training goes on past its best validation loss",
        DYNAMICS_TIER,
        "stop earlier (early stopping on the validation loss) or train fewer epochs",
    ),
    _cause(
        "router_collapse",
        "a mixture-of-experts router sends its tokens to few experts",
        DYNAMICS_TIER,
        "raise the load-balance loss coefficient (Switch Transformer uses 0.01), add the "
        "router z-loss (ST-MoE: 0.001) or noise to the router logits, or lower the router's "
        "learning rate",
        "dead_experts",
        "expert_imbalance",
    ),
    # -- symptoms --
    _cause(
        "dead_experts",
        "experts of a mixture-of-experts layer receive no tokens",
        SYMPTOM_TIER,
        "raise the load-balance loss coefficient, or re-initialise the dead experts",
        "expert_imbalance",
    ),
    _cause(
        "expert_imbalance",
        "a mixture-of-experts layer's load is imbalanced",
        SYMPTOM_TIER,
        "raise the load-balance loss coefficient or the capacity factor",
    ),
    _cause(
        "update_spike",
        "the weight update spikes (loss spikes tend to follow)",
        SYMPTOM_TIER,
        "lower the learning rate or clip gradients; look for the batch that caused it, and "
        "consider skipping such updates (tensortap.pytorch.Guard)",
        "loss_spike",
        "diverging",
    ),
    _cause(
        "exploding_gradient",
        "gradients explode",
        SYMPTOM_TIER,
        "lower the learning rate, clip gradients (torch.nn.utils.clip_grad_norm_), check the "
        "initialisation and the input scale",
        "nonfinite",
        "diverging",
        "loss_spike",
        "dead_relu",
        "saturated_activation",
        "no_learnable_signal",
    ),
    _cause(
        "diverging",
        "the loss diverges",
        SYMPTOM_TIER,
        "lower the learning rate; check the loss and the input scale",
        "nonfinite",
        "loss_spike",
        "no_learnable_signal",
    ),
    _cause(
        "nonfinite",
        "NaN or infinite values appear",
        SYMPTOM_TIER,
        "find the first operation that made them (a log or division of 0, a sqrt of a "
        "negative, an overflow): guard it with a clamp or an epsilon",
        "all_zero",
        "dead_relu",
        "vanishing_gradient",
        "no_learnable_signal",
    ),
    _cause(
        "loss_spike",
        "the loss spikes",
        SYMPTOM_TIER,
        "lower the learning rate or clip gradients; look for bad batches",
    ),
    _cause(
        "dead_relu",
        "ReLU units are dead",
        SYMPTOM_TIER,
        "check the biases' initialisation and the learning rate; LeakyReLU or GELU do not die",
        "vanishing_gradient",
        "all_zero",
        "no_progress",
        "underfitting",
        "not_updating",
        "no_learnable_signal",
    ),
    _cause(
        "saturated_activation",
        "sigmoid/tanh units are saturated",
        SYMPTOM_TIER,
        "scale the inputs of sigmoid/tanh layers (normalise the inputs, use normalisation "
        "layers), or use ReLU-like activations",
        "vanishing_gradient",
        "no_progress",
        "underfitting",
        "not_updating",
        "no_learnable_signal",
    ),
    _cause(
        "vanishing_gradient",
        "gradients vanish",
        SYMPTOM_TIER,
        "use ReLU-like activations, normalisation layers, residual connections or a better "
        "initialisation",
        "no_progress",
        "underfitting",
        "not_updating",
        "all_zero",
        "lr_too_low",
        "no_learnable_signal",
    ),
    _cause(
        "all_zero",
        "tensors are all zero",
        SYMPTOM_TIER,
        "check the inputs and the initialisation",
        "vanishing_gradient",
        "dead_relu",
        "no_progress",
        "underfitting",
        "not_updating",
        "no_learnable_signal",
    ),
    _cause(
        "not_updating",
        "weights are not updating",
        SYMPTOM_TIER,
        "check that every trainable parameter is in the optimizer, that optimizer.step() "
        "runs, and the learning rate",
        "no_progress",
        "underfitting",
        "no_learnable_signal",
    ),
    _cause(
        "class_given_up",
        "the model gives up on a class",
        SYMPTOM_TIER,
        "look at that class's samples (too few, mislabelled, or alike another class's); weight "
        "it in the loss or collect more of it",
    ),
    _cause(
        "no_progress",
        "the loss does not decrease",
        SYMPTOM_TIER,
        "check the learning rate, the labels, and that the loss is computed on the right tensors",
        "underfitting",
    ),
    _cause(
        "underfitting",
        "the model fits worse than a linear model of its inputs",
        SYMPTOM_TIER,
        "standardise the input features, then check the learning rate (too low?), the "
        "initialisation and the training's length: a network should at least match a "
        "least-squares line through its inputs",
    ),
)

#: Every cause by id.
CAUSES: Mapping[str, Cause] = {c.id: c for c in _ALL}

#: The cause a built-in rule's problem usually names, when its finding does not say.
RULE_CAUSES: Mapping[str, str] = {
    "ExplodingTensor": "nonfinite",
    "NaNInfRootCause": "nonfinite",
    "GradientNormSpike": "exploding_gradient",
    "VanishingGradient": "vanishing_gradient",
    "DeadRelu": "dead_relu",
    "SaturatedActivation": "saturated_activation",
    "WeightsNotUpdating": "not_updating",
    "UnchangedTensor": "not_updating",
    "CheckInputImages": "unnormalised_input",
    "ClassImbalance": "class_imbalance",
    "Overfit": "overfitting",
    "Overtraining": "overtraining",
    "PoorWeightInitialization": "poor_init",
    "AllZero": "all_zero",
    "LossSpike": "loss_spike",
    "LossNotDecreasing": "no_progress",
    "WeightUpdateRatio": "lr_too_low",
    "RouterCollapse": "router_collapse",
    "DeadExperts": "dead_experts",
    "ExpertImbalance": "expert_imbalance",
    "UpdateNormSpike": "update_spike",
}


#: Rules that judge what training achieves (the loss, the validation, the predictions): a
#: problem one of them finds is *harm*, what the user would call a broken run. Symptoms (what
#: the tensors show: dead or saturated units, small or large gradients, zeros) are problems only
#: in a harmed run, where they are evidence; in a run without harm they are warnings.
OUTCOME_RULES: frozenset[str] = frozenset(
    {
        "ExplodingTensor",
        "NaNInfRootCause",
        "LossNotDecreasing",
        "AccuracyAtChance",
        "Overfit",
        "Overtraining",
        "ClassImbalance",
        "Confusion",
    }
)

#: The outcome rules that judge what training achieves beyond finite values: one that judged
#: a run and saw no problem clears the symptoms in it (see ``_verdict.cleared``).
PROGRESS_RULES: frozenset[str] = OUTCOME_RULES - {"ExplodingTensor", "NaNInfRootCause"}


def is_harm(rule: str, finding: Mapping[str, Any]) -> bool:
    """Whether a problem-severity finding of ``rule`` (a configuration's name; the finding's
    ``rule_class`` says which built-in rule it is) is harm: an outcome rule's problem, or
    non-finite values wherever they were seen."""
    cause = cause_of(finding)
    kind = str(finding.get("rule_class") or rule)
    return kind in OUTCOME_RULES or (cause is not None and cause.id == "nonfinite")


def cause_of(finding: Mapping[str, Any]) -> Cause | None:
    """The cause a triggered finding (``Finding.to_dict()``) names, or None for a rule with
    no known cause (a custom rule that does not say). A finding whose evidence rules out some
    of what its cause explains says so in ``details["explains_not"]`` (a frozen backbone that
    was trained, under an output layer that trains, still gives the head features to learn
    from: it does not explain a model that learned nothing): its cause explains the rest."""
    details = finding.get("details") or {}
    named = details.get("cause")
    if isinstance(named, str) and named in CAUSES:
        ruled_out = details.get("explains_not")
        if isinstance(ruled_out, list | tuple) and ruled_out:
            cause = CAUSES[named]
            return replace(cause, explains=cause.explains - {str(c) for c in ruled_out})
        return CAUSES[named]
    if details.get("nonfinite"):
        return CAUSES["nonfinite"]
    rule = str(finding.get("rule_class") or finding.get("rule") or "")
    if rule == "LossNotDecreasing" and details.get("diverging"):
        return CAUSES["diverging"]
    if rule == "WeightUpdateRatio" and details.get("direction") == "large":
        return CAUSES["lr_too_high"]
    known = RULE_CAUSES.get(rule)
    return None if known is None else CAUSES[known]
