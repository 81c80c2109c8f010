"""The on-disk format: golden bytes, a committed v1 trial, corruption detection."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.core._modes import ModeKeys
from tensortap.exceptions import FormatError, UnsupportedFormatVersion
from tensortap.format._index import RECORD_DTYPE, decode_index
from tests.helpers.golden_inputs import HEADER, build_index, golden_values

GOLDEN = Path(__file__).parents[1] / "golden"


def test_index_encoding_matches_golden_bytes() -> None:
    assert build_index() == (GOLDEN / "index_v1.ttidx").read_bytes()


def test_index_decodes_as_documented() -> None:
    index = decode_index((GOLDEN / "index_v1.ttidx").read_bytes())
    assert RECORD_DTYPE.itemsize == 64
    assert index.names == ["w", "loss"] and index.dtypes == ["<f4", "<f8"]
    assert index.header["session"] == HEADER["session"]
    assert index.steps == [[7, int(ModeKeys.TRAIN), 3, 1700000000.5]]
    rec = index.records
    assert rec["kind"].tolist() == [0, 1, 2]
    assert rec["reduction"].tolist() == [0, 9, 0]  # l2 is code 9
    assert rec["abs"].tolist() == [0, 1, 0]
    assert rec["value"][1] == 2.5 and rec["crc32"][0] == 1234
    assert index.shape_of(0) == (2, 2) and index.shape_of(2) == ()


def test_committed_v1_trial_still_reads() -> None:
    trial = tt.create_trial(GOLDEN / "trial_v1")
    assert trial.loaded_all_steps
    assert trial.steps(tt.modes.TRAIN) == [0, 1] and trial.steps(tt.modes.EVAL) == [0]
    for name, value in golden_values().items():
        expected = value + 1 if value.dtype != bool else value
        np.testing.assert_array_equal(trial.tensor(name).value(1, mode=tt.modes.TRAIN), expected)
    assert trial.tensor("f32").reduction_value(1, "l2") == pytest.approx(
        float(np.linalg.norm(np.arange(6) + 1))
    )
    assert trial.tensor("loss").value(0, mode=tt.modes.EVAL) == 0.25


def test_corruption_is_detected(tmp_path: Path) -> None:
    raw = bytearray(build_index())
    raw[40] ^= 0xFF
    with pytest.raises(FormatError, match="checksum"):
        decode_index(bytes(raw))
    with pytest.raises(FormatError, match="not a tensortap index"):
        decode_index(b"PK\x03\x04" + bytes(40))
    with pytest.raises(FormatError, match="truncated"):
        decode_index(b"TTIX")
    # one flipped bit in the version field is corruption, not "upgrade tensortap"
    flipped = bytearray(build_index())
    flipped[4] ^= 0x02
    with pytest.raises(FormatError, match="checksum") as caught:
        decode_index(bytes(flipped))
    assert not isinstance(caught.value, UnsupportedFormatVersion)
    # an intact index of a newer version asks for a newer tensortap
    newer = bytearray(build_index())
    newer[4] = 2
    newer[-4:] = struct.pack("<I", zlib.crc32(bytes(newer[:-4])))
    with pytest.raises(UnsupportedFormatVersion, match="version 2"):
        decode_index(bytes(newer))


def test_corrupt_tensor_bytes_are_detected(tmp_path: Path) -> None:
    out = tmp_path / "t"
    with tt.Hook(out, save_config=tt.SaveConfig(save_interval=1)) as hook:
        hook.save_tensor("x", np.arange(4.0))
    (data,) = (out / "workers" / "worker_0" / "data").iterdir()
    raw = bytearray(data.read_bytes())
    raw[0] ^= 0x01
    data.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match="fails its checksum"):
        tt.create_trial(out).tensor("x").value(0)


@pytest.mark.parametrize(
    ("field", "value", "table"),
    [("name", 99, "names"), ("dtype", 7, "dtypes"), ("ndim", 200, "dims"), ("kind", 9, "kinds")],
)
def test_records_pointing_outside_their_tables_are_rejected(field, value, table) -> None:
    """A record whose checksum holds but whose references do not (a buggy or hostile writer)
    is refused when the index is read, not met as an IndexError deep inside a reader."""
    raw = bytearray(build_index())
    records = decode_index(bytes(raw)).records.copy()
    at = bytes(raw).find(records.tobytes())
    records[field][0] = value
    raw[at : at + records.nbytes] = records.tobytes()
    raw[-4:] = zlib.crc32(bytes(raw[:-4])).to_bytes(4, "little")
    with pytest.raises(FormatError, match=f"record 0 refers to unknown {table}"):
        decode_index(bytes(raw))
