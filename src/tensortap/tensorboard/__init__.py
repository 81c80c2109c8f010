"""TensorBoard output: a trial's scalars and histograms as standard TensorBoard event files.

Written live by a hook (``Hook(..., export_tensorboard=True, tensorboard_dir=...)``) or after
the fact from a trial (:func:`export_trial`, ``tensortap tensorboard TRIAL OUT_DIR``).
Needs the ``tensorboard`` package (``pip install tensortap[viz]``).
"""

from tensortap.tensorboard._export import TensorBoardExporter, export_trial

__all__ = ["TensorBoardExporter", "export_trial"]
