"""Old path of ``S3Store`` (documented until issue 49): ``from tensortap.storage import
S3Store``. Importing it warns; it goes away in tensortap 0.3.0."""

from tensortap.core._old_paths import warn_old_path
from tensortap.storage import S3Store

warn_old_path(__name__, {"S3Store": "tensortap.storage"})

__all__ = ["S3Store"]
