"""tensortap for Lightning: :class:`TensortapCallback` for ``lightning.pytorch.Trainer``, and
:class:`PLTensortapCallback` for the ``pytorch_lightning`` spelling of the same Trainer (each
Trainer accepts only its own package's ``Callback``); :class:`RollbackCallback`,
:class:`LightningCheckpoints` and :func:`fit_with_rollback` roll a fit back to its last good
checkpoint (see :mod:`tensortap.lightning.rollback`). A name is None when its package is not
installed. Names load at first use, as the framework faces' (see :mod:`tensortap._faces`)."""

from typing import TYPE_CHECKING

from tensortap._faces import face

if TYPE_CHECKING:
    from tensortap.lightning.callback import CallbackMixin  # noqa: F401
    from tensortap.lightning.lightning_callback import TensortapCallback  # noqa: F401
    from tensortap.lightning.pl_callback import PLTensortapCallback  # noqa: F401
    from tensortap.lightning.rollback import (  # noqa: F401
        LightningCheckpoints,
        RollbackCallback,
        fit_with_rollback,
    )

__all__, __getattr__, __dir__ = face(__name__)
