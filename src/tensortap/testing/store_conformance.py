"""Old path of the store conformance suite (documented until issue 49): ``from
tensortap.testing import check_store, CHECKS``. Importing it warns; it goes away in tensortap
0.3.0."""

from tensortap.core._old_paths import warn_old_path
from tensortap.testing import CHECKS, check_store

warn_old_path(__name__, {"check_store": "tensortap.testing", "CHECKS": "tensortap.testing"})

__all__ = ["CHECKS", "check_store"]
