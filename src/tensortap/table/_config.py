"""The runs' configurations beside the exported rows: one small Parquet file per run,
``config/run=<run>/config.parquet``, rewritten (atomically) by each export of the run, and the
DuckDB view ``config`` over them (:func:`tensortap.table.query`)::

    SELECT s.run, c.number AS lr, max(s.value) FROM stats s JOIN config c USING (run)
    WHERE c.key = 'learning_rate' AND s.tensor = 'vitals/loss' GROUP BY s.run, c.number

Each leaf of ``trial.config()`` is a row: ``key`` its path (``optimizer.param_groups.0.lr``),
``value`` its JSON text, ``number`` the value when it is a number (null otherwise)."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tensortap.storage import Store
from tensortap.trials._trial import Trial

CONFIG_SCHEMA = pa.schema([("key", pa.string()), ("value", pa.string()), ("number", pa.float64())])
CONFIG_VIEW = "config"
CONFIG_PART = re.compile(r"config/run=([^/]+)/config\.parquet")


def config_part(run: str) -> str:
    """The key of ``run``'s configuration in a dataset."""
    return f"config/run={run}/config.parquet"


def flatten(config: Any, prefix: str = "") -> list[tuple[str, str, float | None]]:
    """The leaves of a configuration as ``(path, JSON text, number or None)`` rows."""
    if isinstance(config, dict) and config:
        rows = []
        for key, value in config.items():
            rows.extend(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return rows
    if isinstance(config, list) and config:
        rows = []
        for i, value in enumerate(config):
            rows.extend(flatten(value, f"{prefix}.{i}" if prefix else str(i)))
        return rows
    number = (
        float(config) if isinstance(config, (int, float)) and not isinstance(config, bool) else None
    )
    return [(prefix, json.dumps(config, sort_keys=True), number)]


def write_run_config(trial: Trial, store: Store, run: str) -> int:
    """Write ``run``'s configuration (the trial's, as it is now) into the dataset; its rows."""
    rows = flatten(trial.config())
    table = pa.table(
        {
            "key": pa.array([r[0] for r in rows], pa.string()),
            "value": pa.array([r[1] for r in rows], pa.string()),
            "number": pa.array([r[2] for r in rows], pa.float64()),
        },
        CONFIG_SCHEMA,
    )
    sink = io.BytesIO()
    pq.write_table(table, sink)
    store.put(config_part(run), sink.getvalue())
    return len(rows)


def read_configs(store: Store, keys: list[str], wanted: set[str] | None) -> pa.Table:
    """The configurations of the runs in ``keys`` (the dataset's listing), ``wanted`` only,
    as one table with a ``run`` column."""
    tables = []
    for key in keys:
        match = CONFIG_PART.fullmatch(key)
        if match is None or (wanted is not None and match.group(1) not in wanted):
            continue
        table = pq.read_table(io.BytesIO(store.get(key))).cast(CONFIG_SCHEMA)
        run = pa.array([match.group(1)] * table.num_rows, pa.string())
        tables.append(table.append_column(pa.field("run", pa.string()), run))
    if not tables:
        empty = CONFIG_SCHEMA.empty_table()
        return empty.append_column(pa.field("run", pa.string()), pa.array([], pa.string()))
    return pa.concat_tables(tables)
