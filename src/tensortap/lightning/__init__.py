"""tensortap for Lightning: :class:`TensortapCallback` for ``lightning.pytorch.Trainer``, and
:class:`PLTensortapCallback` for the ``pytorch_lightning`` spelling of the same Trainer (each
Trainer accepts only its own package's ``Callback``); :class:`RollbackCallback`
(:class:`PLRollbackCallback`), :class:`LightningCheckpoints` and :func:`fit_with_rollback`
roll a fit back to its last good checkpoint, in memory within the fit or from Lightning's own
files (see :mod:`tensortap.lightning._rollback`); :class:`GuardedModelCheckpoint`,
:func:`last_good_checkpoint` and :func:`verify_checkpoint` keep NaN weights out of its
checkpoints and its resumes (see :mod:`tensortap.lightning._checkpoint_guard`). A name is
None when its package is not installed. Names load at first use, as the framework faces'
(see :mod:`tensortap._faces`)."""

from typing import TYPE_CHECKING

from tensortap._faces import face

if TYPE_CHECKING:  # `X as X`: re-exported for type checkers (no static __all__ here)
    from tensortap.lightning._callback import CallbackMixin as CallbackMixin
    from tensortap.lightning._checkpoint_guard import (
        GuardedModelCheckpoint as GuardedModelCheckpoint,
    )
    from tensortap.lightning._checkpoint_guard import (
        last_good_checkpoint as last_good_checkpoint,
    )
    from tensortap.lightning._checkpoint_guard import verify_checkpoint as verify_checkpoint
    from tensortap.lightning._lightning_callback import RollbackCallback as RollbackCallback
    from tensortap.lightning._lightning_callback import TensortapCallback as TensortapCallback
    from tensortap.lightning._pl_callback import PLRollbackCallback as PLRollbackCallback
    from tensortap.lightning._pl_callback import PLTensortapCallback as PLTensortapCallback
    from tensortap.lightning._rollback import LightningCheckpoints as LightningCheckpoints
    from tensortap.lightning._rollback import fit_with_rollback as fit_with_rollback

__all__, __getattr__, __dir__ = face(__name__)
