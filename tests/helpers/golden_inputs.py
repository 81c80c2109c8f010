"""Deterministic inputs of the golden format files (tests/golden/)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import tensortap as tt
from tensortap.core._modes import ModeKeys
from tensortap.core._records import Record, RecordKind
from tensortap.format._index import INDEX_KEPT_DATA, INDEX_PACKED, IndexBuilder

HEADER = {"worker": "worker_0", "seq": 0, "session": "golden", "data_key": "d", "data_size": 16}
#: Version 3's golden index: the same records as a merged segment 1 of one part, segment 0,
#: that kept its 16 bytes of data in its own data object.
MERGED_HEADER = {**HEADER, "seq": 1, "data_size": 0, "parts": [[0, "golden", 3, 1, 0, 16]]}


def build_index(version: int = INDEX_PACKED) -> bytes:
    """The golden index, packed (what the writer writes), plain (``version=1``), or merged
    with its part's data kept (``version=3``)."""
    builder = IndexBuilder()
    builder.add_step(7, ModeKeys.TRAIN, 3, 1700000000.5)
    builder.add(Record("w", RecordKind.TENSOR, "<f4", (2, 2)), 7, ModeKeys.TRAIN, 3, 0, 16, 1234)
    builder.add(
        Record("w", RecordKind.REDUCTION, "<f4", (2, 2), None, "l2", True, 2.5),
        7,
        ModeKeys.TRAIN,
        3,
    )
    builder.add(Record("loss", RecordKind.SHAPE, "<f8", ()), 7, ModeKeys.TRAIN, 3)
    return builder.encode(MERGED_HEADER if version == INDEX_KEPT_DATA else HEADER, version)


def golden_values() -> dict[str, np.ndarray]:
    return {
        "f32": np.arange(6, dtype=np.float32).reshape(2, 3),
        "i64": np.array([-1, 2**40], dtype=np.int64),
        "c64": np.array([1 + 2j], dtype=np.complex64),
        "b": np.array([True, False]),
        "scalar": np.array(3.5),
        "empty": np.zeros((0, 4), np.float16),
    }


def write_trial(path: Path) -> None:
    rc = tt.ReductionConfig(reductions=["mean"], norms=["l2"], save_raw_tensor=True)
    with tt.Hook(path, save_config=tt.SaveConfig(save_interval=1), reduction_config=rc) as hook:
        hook.set_mode(tt.modes.TRAIN)
        for step in range(2):
            for name, value in golden_values().items():
                hook.save_tensor(name, value + step if value.dtype != bool else value)
            hook.next_step()
        hook.set_mode(tt.modes.EVAL)
        hook.save_scalar("loss", 0.25)
