"""The built-in rules, one per module, by name.

A new built-in rule is its module, one import line here and its name in ``__all__``:
``BUILTIN_RULES``, the names ``tensortap.rules`` exports and the ``rule_configs`` helpers
follow from the imports.
"""

from __future__ import annotations

from tensortap.rules.builtin.accuracy_at_chance import AccuracyAtChance
from tensortap.rules.builtin.all_zero import AllZero
from tensortap.rules.builtin.check_input_images import CheckInputImages
from tensortap.rules.builtin.class_imbalance import ClassImbalance
from tensortap.rules.builtin.confusion import Confusion
from tensortap.rules.builtin.dead_relu import DeadRelu
from tensortap.rules.builtin.exploding_tensor import ExplodingTensor
from tensortap.rules.builtin.feature_importance_overweight import FeatureImportanceOverweight
from tensortap.rules.builtin.frozen_layer import FrozenLayer
from tensortap.rules.builtin.gradient_norm_spike import GradientNormSpike
from tensortap.rules.builtin.loss_not_decreasing import LossNotDecreasing
from tensortap.rules.builtin.loss_spike import LossSpike
from tensortap.rules.builtin.low_precision_range import LowPrecisionRange
from tensortap.rules.builtin.nan_inf_root_cause import NaNInfRootCause
from tensortap.rules.builtin.nlp_sequence_ratio import NLPSequenceRatio
from tensortap.rules.builtin.overfit import Overfit
from tensortap.rules.builtin.overtraining import Overtraining
from tensortap.rules.builtin.poor_weight_initialization import PoorWeightInitialization
from tensortap.rules.builtin.saturated_activation import SaturatedActivation
from tensortap.rules.builtin.similar_across_runs import SimilarAcrossRuns
from tensortap.rules.builtin.stalled_training import StalledTrainingRule
from tensortap.rules.builtin.tensor_variance import TensorVariance
from tensortap.rules.builtin.training_loop import TrainingLoop
from tensortap.rules.builtin.tree_depth import TreeDepth
from tensortap.rules.builtin.unchanged_tensor import UnchangedTensor
from tensortap.rules.builtin.unnormalised_input import UnnormalisedInput
from tensortap.rules.builtin.vanishing_gradient import VanishingGradient
from tensortap.rules.builtin.weight_update_ratio import WeightUpdateRatio
from tensortap.rules.builtin.weights_not_updating import WeightsNotUpdating
from tensortap.rules.rule import Rule

#: Every built-in rule by class name: the Rule classes imported above.
BUILTIN_RULES: dict[str, type[Rule]] = {
    cls.__name__: cls
    for cls in list(globals().values())
    if isinstance(cls, type) and issubclass(cls, Rule) and cls is not Rule
}

__all__ = [
    "BUILTIN_RULES",
    "AccuracyAtChance",
    "AllZero",
    "CheckInputImages",
    "ClassImbalance",
    "Confusion",
    "DeadRelu",
    "ExplodingTensor",
    "FeatureImportanceOverweight",
    "FrozenLayer",
    "GradientNormSpike",
    "LossNotDecreasing",
    "LossSpike",
    "LowPrecisionRange",
    "NLPSequenceRatio",
    "NaNInfRootCause",
    "Overfit",
    "Overtraining",
    "PoorWeightInitialization",
    "SaturatedActivation",
    "SimilarAcrossRuns",
    "StalledTrainingRule",
    "TensorVariance",
    "TrainingLoop",
    "TreeDepth",
    "UnchangedTensor",
    "UnnormalisedInput",
    "VanishingGradient",
    "WeightUpdateRatio",
    "WeightsNotUpdating",
]
