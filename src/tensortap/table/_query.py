"""SQL over an exported dataset with DuckDB: the dataset is the view ``stats``.

::

    tensortap query "SELECT run, tensor, max(value) FROM stats WHERE collection = 'losses'
                     GROUP BY run, tensor"
        --data stats/

A local dataset is read by DuckDB in place (only the row groups a query needs), from the exact
files listed under the path given: the path is never a glob pattern. One on object
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
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from tensortap.exceptions import InvalidConfigError
from tensortap.storage import Store, local_path, open_store, what_is_there
from tensortap.table._config import CONFIG_VIEW, read_configs
from tensortap.table._export import SCHEMA, check_run_name

_PART = re.compile(r"run=([^/]+)/part-\d+\.parquet")
VIEW = "stats"


def connect(
    data: str | os.PathLike[str] | Store, runs: Sequence[str] | None = None
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection where the dataset at ``data`` (or only ``runs`` of it)
    is the view ``stats`` (the dataset's columns plus ``run``), and the runs' configurations
    the view ``config`` (``run``, ``key``, ``value``, ``number``: see
    :mod:`tensortap.table._config`)."""
    wanted = None if runs is None else {check_run_name(r) for r in runs}
    local = local_path(data)
    store = open_store(data if local is None else local)
    parts = _parts(store, wanted)
    con = duckdb.connect()
    # the runs' configurations: a few rows each, read into memory
    con.register("_tensortap_config", read_configs(store, store.list("config/"), wanted))
    con.execute(f"CREATE VIEW {CONFIG_VIEW} AS SELECT * FROM _tensortap_config")
    if parts and local is not None:
        # The files as a pyarrow dataset of the exact paths listed, not DuckDB's read_parquet:
        # that expands '[', '*' and '?' in every path given, so a dataset named 'run[1]' would
        # answer from its sibling 'run1'. DuckDB still reads only the row groups it needs.
        files = ds.dataset(
            [os.path.join(local, key) for key, _ in parts],
            schema=SCHEMA.append(pa.field("run", pa.string())),
            format="parquet",
            partitioning=ds.partitioning(pa.schema([("run", pa.string())]), flavor="hive"),
            partition_base_dir=local,
        )
        con.register("_tensortap_stats", files)
        con.execute(f"CREATE VIEW {VIEW} AS SELECT * FROM _tensortap_stats")
        return con
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


def _parts(store: Store, wanted: set[str] | None) -> list[tuple[str, str]]:
    """The dataset's part files (key, run), ``wanted`` runs only, in order. A location that
    holds nothing is no dataset: a mistyped ``--data`` must not answer 0 rows."""
    keys = store.list("")
    if not keys:
        raise InvalidConfigError(
            f"no dataset at {store.location}: {what_is_there(store)}. Give the directory (or "
            "s3:// URL) that `tensortap export TRIAL... --parquet DIR` wrote"
        )
    found = []
    for key in keys:
        match = _PART.fullmatch(key)
        if match and (wanted is None or match.group(1) in wanted):
            found.append((key, match.group(1)))
    return sorted(found)


def _with_run(table: pa.Table, run: str | None) -> pa.Table:
    column = pa.array([run] * table.num_rows, type=pa.string())
    return table.append_column(pa.field("run", pa.string()), column)
