"""``import tensortap.tensorflow as smd`` (smdebug's spelling): the same as tensortap.keras."""

from tensortap.keras import *  # noqa: F403
from tensortap.keras import __all__  # noqa: F401
