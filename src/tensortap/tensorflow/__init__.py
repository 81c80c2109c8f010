"""``import tensortap.tensorflow as smd`` (smdebug's spelling): the same as tensortap.keras."""

from typing import TYPE_CHECKING

from tensortap._faces import face

if TYPE_CHECKING:
    from tensortap.keras import *  # noqa: F403

__all__, __getattr__, __dir__ = face(__name__)
