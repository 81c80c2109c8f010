"""SQL over an exported dataset with DuckDB: the dataset is the view ``stats``.

::

    tensortap query "SELECT run, max(value) FROM stats WHERE tensor = 'loss' GROUP BY run"
        --data stats/

A local dataset is read by DuckDB in place (only the row groups a query needs). One on object
storage (``s3://``) is fetched through tensortap's store (DuckDB's own S3 support is an
extension downloaded at run time, which a machine without internet cannot have) into memory
first: filter it with ``--runs`` when it is large.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Sequence
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from tensortap.storage import Store, open_store
from tensortap.table.export import SCHEMA, check_run_name

_PART = re.compile(r"run=([^/]+)/part-\d+\.parquet")
VIEW = "stats"


def connect(
    data: str | os.PathLike[str] | Store, runs: Sequence[str] | None = None
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection where the dataset at ``data`` (or only ``runs`` of it)
    is the view ``stats`` (the dataset's columns plus ``run``)."""
    wanted = None if runs is None else {check_run_name(r) for r in runs}
    con = duckdb.connect()
    local = _local_dir(data)
    if local is not None:
        parts = _parts(open_store(local), wanted)
        if parts:
            files = ", ".join(_quote(os.path.join(local, key)) for key, _ in parts)
            con.execute(
                f"CREATE VIEW {VIEW} AS SELECT * FROM read_parquet([{files}], "
                "hive_partitioning = true, hive_types = {'run': VARCHAR})"
            )
            return con
    else:
        store = open_store(data)
        parts = _parts(store, wanted)
        if parts:
            blobs = store.get_many([key for key, _ in parts])
            tables = [
                _with_run(pq.read_table(io.BytesIO(blob)), run)
                for blob, (_, run) in zip(blobs, parts, strict=True)
            ]
            con.register("_tensortap_stats", pa.concat_tables(tables))
            con.execute(f"CREATE VIEW {VIEW} AS SELECT * FROM _tensortap_stats")
            return con
    con.register("_tensortap_stats", _with_run(SCHEMA.empty_table(), None))
    con.execute(f"CREATE VIEW {VIEW} AS SELECT * FROM _tensortap_stats")
    return con


def query(
    sql: str, data: str | os.PathLike[str] | Store, runs: Sequence[str] | None = None
) -> pa.Table:
    """Run ``sql`` (over the view ``stats``) on the dataset at ``data``; the result as an
    Arrow table."""
    con = connect(data, runs)
    try:
        relation: Any = con.sql(sql)  # None for a statement that returns no rows
        table: pa.Table = pa.table({}) if relation is None else relation.to_arrow_table()
        return table
    finally:
        con.close()


def _local_dir(data: Any) -> str | None:
    if isinstance(data, Store):
        return None
    text = str(os.fspath(data))
    if text.startswith("file://"):
        return text[len("file://") :]
    return None if "://" in text else text


def _parts(store: Store, wanted: set[str] | None) -> list[tuple[str, str]]:
    """The dataset's part files (key, run), ``wanted`` runs only, in order."""
    found = []
    for key in store.list(""):
        match = _PART.fullmatch(key)
        if match and (wanted is None or match.group(1) in wanted):
            found.append((key, match.group(1)))
    return sorted(found)


def _with_run(table: pa.Table, run: str | None) -> pa.Table:
    column = pa.array([run] * table.num_rows, type=pa.string())
    return table.append_column(pa.field("run", pa.string()), column)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
