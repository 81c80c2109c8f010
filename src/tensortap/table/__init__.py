"""Saved statistics as a table: :func:`export_parquet` writes trials as one Parquet dataset
(a partition per run, appended to as trials grow), :func:`query` runs DuckDB SQL over it.
Needs ``pip install 'tensortap[table]'`` (pyarrow, duckdb)."""

from __future__ import annotations

from tensortap.table._export import SCHEMA, Exported, ExportError, export_parquet, export_trial
from tensortap.table._query import connect, query

__all__ = [
    "SCHEMA",
    "ExportError",
    "Exported",
    "connect",
    "export_parquet",
    "export_trial",
    "query",
]
