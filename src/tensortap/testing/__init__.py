"""Helpers for testing code that reads trials (rules, reports): build real trials from NumPy."""

from tensortap.testing.fake_trial import TrialBuilder, infer_collections

__all__ = ["TrialBuilder", "infer_collections"]
