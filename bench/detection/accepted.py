"""Which root causes count as naming a fault kind of the generated benchmark *first*.

Fixed before the rules were judged on the generated runs, from what each fault is, not from what
the rules say: the cause a person must be told to fix it. Symptoms never count (a NaN run whose
cause is a learning rate x100 is named only by ``lr_too_high``). Where two causes lead to the
same fix (an undivided gradient accumulation is an effective learning rate K times too high), both
count; this is said next to the kind.
"""

from __future__ import annotations

ACCEPTED_FIRST: dict[str, frozenset[str]] = {
    kind: frozenset(causes)
    for kind, causes in {
        "lr_x100": {"lr_too_high"},
        "lr_div1000": {"lr_too_low"},
        "no_zero_grad": {"grads_not_cleared"},
        # step() never called (dev), or called without its parentheses (dev2); the family
        # split's implementation steps an optimizer built over a stale copy of the model, which
        # holds none of the parameters the model uses: "parameters are left out of the
        # optimizer" (with "built over another model, or a copy?") names that fix exactly, so
        # it counts too (issue 44, twenty-second session; the family split's earlier tables
        # counted only optimizer_not_stepping: 0 of 22 there)
        "no_optimizer_step": {"optimizer_not_stepping", "params_not_in_optimizer"},
        "params_not_in_optimizer": {"params_not_in_optimizer"},
        "frozen_by_mistake": {"frozen_layer"},
        "zero_init": {"poor_init"},
        "constant_init": {"poor_init"},
        "huge_init": {"poor_init"},
        # a bias pushed negative is an initialisation fault whose first sign is dead units
        "dead_relu_bias": {"poor_init", "dead_relu"},
        # inputs scaled into saturation: the input's scale is the fault, saturation its sign
        "saturating_inputs": {"unnormalised_input", "saturated_activation"},
        "unnormalised_images": {"unnormalised_input"},
        "unnormalised_tabular": {"unnormalised_input"},
        "shuffled_labels": {"no_learnable_signal"},
        "class_imbalance": {"class_imbalance"},
        "tiny_train_set": {"overfitting", "small_training_set"},
        "overtraining": {"overtraining", "overfitting"},
        "nan_op": {"nonfinite"},
        "loss_broadcast": {"loss_shape_mismatch"},
        # K micro-batch losses summed, not averaged: the step is K times too large
        "grad_accumulation_undivided": {"accumulation_undivided", "lr_too_high"},
        "scheduler_per_batch": {"scheduler_per_batch"},
        "eval_mode_forgotten": {"eval_in_train_mode"},
        "softmax_twice": {"softmax_before_loss"},
        # -- kinds added with the family split (issue 44); fixed from what each fault is --
        # recurrent weights started above the identity: the init is the fault, gradients that
        # explode through time its sign; clipping or a smaller init fixes it, so both count
        "recurrent_explosion": {"exploding_gradient", "poor_init"},
        # Dropout(p=1.0) / a detached input: no gradient reaches the layers below.
        # vanishing_gradient sends a person to the lower layers' gradients, where the zeros
        # are; `gradient_blocked` (added in issue 44's second session, from what the fault is:
        # the graph cut between the weights and the loss) names it exactly
        "zero_gradients": {"vanishing_gradient", "gradient_blocked"},
        # images divided by 255 twice, features in units 1000x too large: the input's scale
        "inputs_too_small": {"unnormalised_input"},
        # the loss's sign flipped (or maximize=True): the update has the wrong sign. The
        # vocabulary had no cause for it until issue 44 added `wrong_sign`; `diverging` names
        # only the symptom (the loss climbing), and lr_too_high sends a person the wrong way
        "gradient_ascent": {"wrong_sign"},
        # a few dozen rows, a wide model, many epochs: the same fix as a tiny training set
        "memorisation": {"overfitting", "small_training_set"},
    }.items()
}


def named_first(first_cause: str | None, label: str) -> bool:
    """Whether a run's diagnosis names its fault kind ``label`` as its first root cause."""
    return first_cause is not None and first_cause in ACCEPTED_FIRST.get(label, frozenset())
