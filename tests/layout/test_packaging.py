"""The package's metadata, as setuptools reads it when the package is installed: no warning
on every install (the licence was a TOML table, which setuptools 77 and later deprecate)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"


def test_the_metadata_reads_without_a_warning_and_names_the_licence() -> None:
    pytest.importorskip("setuptools")
    from setuptools.config.pyprojecttoml import apply_configuration  # type: ignore[import-untyped]
    from setuptools.dist import Distribution  # type: ignore[import-untyped]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), str(PYPROJECT))
    assert [str(w.message) for w in caught] == []
    assert dist.metadata.license_expression == "Apache-2.0"
