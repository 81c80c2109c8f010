"""tensortap for PyTorch: ``import tensortap.pytorch as tt``.

::

    hook = tt.Hook(out_dir="runs/job1", save_config=tt.SaveConfig(save_interval=10),
                   include_collections=["weights", "gradients", "losses", "relu_activations"])
    hook.register_module(model)
    hook.register_loss(loss_fn)

Its names load at first use (the list is in :mod:`tensortap._faces`).
"""

from typing import TYPE_CHECKING

from tensortap._faces import face

if TYPE_CHECKING:  # `X as X`: re-exported for type checkers (no static __all__ here)
    from tensortap._shared import *  # noqa: F403
    from tensortap.core._rollback_target import RollbackTarget as RollbackTarget
    from tensortap.core._spike_forecast import ForecastConfig as ForecastConfig
    from tensortap.core._spike_forecast import SpikeForecast as SpikeForecast
    from tensortap.core._spike_forecast import SpikeWarning as SpikeWarning
    from tensortap.healing._budget import SkipBudget as SkipBudget
    from tensortap.healing._checkpoints import MemoryCheckpoints as MemoryCheckpoints
    from tensortap.healing._rollback import Rollback as Rollback
    from tensortap.healing._rollback import RollbackEvent as RollbackEvent
    from tensortap.healing._skip_batches import SkipBatches as SkipBatches
    from tensortap.pytorch._checkpoint_guard import CheckpointEvent as CheckpointEvent
    from tensortap.pytorch._checkpoint_guard import CheckpointGuard as CheckpointGuard
    from tensortap.pytorch._checkpoint_guard import GuardedCheckpoints as GuardedCheckpoints
    from tensortap.pytorch._checkpoints import DistributedCheckpoints as DistributedCheckpoints
    from tensortap.pytorch._checkpoints import FunctionCheckpoints as FunctionCheckpoints
    from tensortap.pytorch._guard import Guard as Guard
    from tensortap.pytorch._guard import GuardEvent as GuardEvent
    from tensortap.pytorch._guard import GuardRecord as GuardRecord
    from tensortap.pytorch._guard import GuardStatus as GuardStatus
    from tensortap.pytorch._hook import Hook as Hook
    from tensortap.pytorch._hook import get_hook as get_hook
    from tensortap.pytorch._naming import OPTIMIZER_VARIABLES as OPTIMIZER_VARIABLES
    from tensortap.pytorch._naming import RELU_ACTIVATIONS as RELU_ACTIVATIONS
    from tensortap.pytorch._remedies import Remedies as Remedies
    from tensortap.pytorch._replay import Replayer as Replayer
    from tensortap.pytorch._replay import ReplayStatus as ReplayStatus
    from tensortap.pytorch._replay_attribution import Attribution as Attribution
    from tensortap.pytorch._spike_watch import SpikeWatch as SpikeWatch

__all__, __getattr__, __dir__ = face(__name__)
