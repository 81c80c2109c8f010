"""Training jobs: run a training script with the hook attached and rules evaluated beside it.

See docs/jobs.md. The names follow the SageMaker SDK of the seeds::

    from tensortap.jobs import TrainingJob, DebuggerHookConfig, CollectionConfig, Rule, rule_configs
"""

from tensortap.jobs._actions import (
    Action,
    Call,
    Command,
    Email,
    RollbackTraining,
    StopTraining,
    Webhook,
)
from tensortap.jobs._hints import shell_command
from tensortap.jobs._job import AttachedJob, TrainingJob
from tensortap.jobs._specs import (
    CollectionConfig,
    DebuggerHookConfig,
    Rule,
    TensorBoardOutputConfig,
)
from tensortap.rules import rule_configs

__all__ = [
    "Action",
    "AttachedJob",
    "Call",
    "CollectionConfig",
    "Command",
    "DebuggerHookConfig",
    "Email",
    "RollbackTraining",
    "Rule",
    "StopTraining",
    "TensorBoardOutputConfig",
    "TrainingJob",
    "Webhook",
    "rule_configs",
    "shell_command",
]
