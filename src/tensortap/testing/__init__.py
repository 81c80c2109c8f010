"""Helpers for testing code that reads trials (rules, reports): build real trials from NumPy;
and for testing a storage backend: the Store conformance suite (:mod:`.store_conformance`)."""

from tensortap.testing.fake_trial import TrialBuilder, infer_collections
from tensortap.testing.store_conformance import check_store

__all__ = ["TrialBuilder", "check_store", "infer_collections"]
