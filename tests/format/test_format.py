"""The on-disk format: golden bytes, a committed v1 trial, corruption detection."""

from __future__ import annotations

import json
import struct
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.core._modes import ModeKeys
from tensortap.core._records import Record, RecordKind
from tensortap.exceptions import FormatError, UnsupportedFormatVersion
from tensortap.format import _layout as layout
from tensortap.format._index import (
    INDEX_KEPT_DATA,
    IndexBuilder,
    IndexPart,
    decode_index,
    encode_index,
)
from tensortap.format._index_rows import RECORD_DTYPE
from tests.helpers.golden_inputs import HEADER, build_index, golden_values

GOLDEN = Path(__file__).parents[1] / "golden"


@pytest.mark.parametrize("version", [1, 2, 3])
def test_index_encoding_matches_golden_bytes(version: int) -> None:
    assert build_index(version) == (GOLDEN / f"index_v{version}.ttidx").read_bytes()


@pytest.mark.parametrize("version", [1, 2, 3])
def test_index_decodes_as_documented(version: int) -> None:
    index = decode_index((GOLDEN / f"index_v{version}.ttidx").read_bytes())
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
    if version == INDEX_KEPT_DATA:  # a merged segment whose part kept its data object
        (part,) = index.parts
        assert part == IndexPart(0, "golden", (0, 3), (0, 1), 0, kept_data=16)
        alone = index.part(part)
        assert alone.data_key == layout.data_key("worker_0", 0)
        assert alone.header["data_size"] == 16 and alone.records["data_offset"][0] == 0
    else:
        assert index.parts == []


def test_a_builders_index_is_what_its_encoding_decodes_to() -> None:
    """The writer merges its own small segments from ``IndexBuilder.index`` instead of reading
    their indexes back: it must be exactly what a reader decodes."""
    builder = IndexBuilder()
    builder.add_step(7, ModeKeys.TRAIN, 3, 1700000000.5)
    builder.add(Record("w", RecordKind.TENSOR, "<f4", (2, 2)), 7, ModeKeys.TRAIN, 3, 0, 16, 1234)
    builder.add(Record("loss", RecordKind.SHAPE, "<f8", ()), 7, ModeKeys.TRAIN, 3)
    builder.add_step(8, ModeKeys.EVAL, 0, 1700000001.25)
    builder.add(Record("w", RecordKind.TENSOR, "<f4", (2, 2)), 8, ModeKeys.EVAL, 0, 16, 16, 99)
    builder.add(
        Record("w", RecordKind.REDUCTION, "<f4", (2, 2), None, "l2", True, 2.5), 8, ModeKeys.EVAL, 0
    )
    header = {**HEADER, "data_size": 32, "dropped": [[5, 1, 4]], "hook_errors": 2}
    built, read = builder.index(header), decode_index(builder.encode(header))
    assert built.header == read.header and built.version == read.version
    assert built.names == read.names and built.dtypes == read.dtypes
    assert built.steps == read.steps == [[7, 1, 3, 1700000000.5], [8, 2, 0, 1700000001.25]]
    assert built.records.dtype == read.records.dtype
    assert built.records.tobytes() == read.records.tobytes()
    assert built.dims.tolist() == read.dims.tolist() == [2] * 6


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
    newer[4] = INDEX_KEPT_DATA + 1
    newer[-4:] = struct.pack("<I", zlib.crc32(bytes(newer[:-4])))
    with pytest.raises(UnsupportedFormatVersion, match=f"version {INDEX_KEPT_DATA + 1}"):
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
    raw = bytearray(build_index(1))
    index = decode_index(bytes(raw))
    records = index.records.copy()
    at = bytes(raw).find(records.tobytes())
    records[field][0] = value
    raw[at : at + records.nbytes] = records.tobytes()
    raw[-4:] = zlib.crc32(bytes(raw[:-4])).to_bytes(4, "little")
    with pytest.raises(FormatError, match=f"record 0 refers to unknown {table}"):
        decode_index(bytes(raw))
    packed = encode_index(index.header, records, index.dims)  # the same, packed
    with pytest.raises(FormatError, match=f"record 0 refers to unknown {table}"):
        decode_index(packed)


def _crafted(version: int, head: bytes, packed: bytes, n_rec: int, n_dims: int = 0) -> bytes:
    """A CRC-valid packed index whose streams are whatever the test gives."""
    prefix = struct.pack("<4sHHIIII", b"TTIX", version, 0, len(head), n_rec, n_dims, len(packed))
    body = prefix + head + packed
    return body + struct.pack("<I", zlib.crc32(body))


def test_a_packed_index_stores_a_scalar_row_in_a_few_bytes() -> None:
    """Issue 48: the index no longer costs 64 bytes a scalar. 10,000 steps of 5 scalars (raw
    8-byte values with their CRCs, the way the writer's rows look) pack to under 12 bytes a
    row, header and steps included, and read back bit for bit."""
    rng = np.random.default_rng(0)
    count = 50_000
    rows = np.zeros(count, dtype=RECORD_DTYPE)
    rows["name"] = np.arange(count) % 5
    rows["mode"] = int(ModeKeys.TRAIN)
    rows["global_step"] = rows["mode_step"] = np.arange(count) // 5
    rows["data_offset"] = np.arange(count) * 8
    rows["data_length"] = 8
    rows["crc32"] = rng.integers(0, 2**32, count, dtype=np.uint32)
    steps = [[s, int(ModeKeys.TRAIN), s, 1.7e9 + s * 0.05] for s in range(count // 5)]
    header = {
        **HEADER,
        "data_size": count * 8,
        "names": ["loss", "grad_norm", "lr", "update_norm", "step_time"],
        "dtypes": ["<f8"],
        "steps": steps,
    }
    plain = encode_index(header, rows, np.empty(0, "<i8"), version=1)
    packed = encode_index(header, rows, np.empty(0, "<i8"))
    assert len(plain) / count > 64
    assert len(packed) / count < 12
    back = decode_index(packed)
    assert back.records.tobytes() == rows.tobytes() and back.header == decode_index(plain).header
    assert len(decode_index(packed, records=False).records) == count


@pytest.mark.parametrize(
    "case",
    [
        "garbage",
        "short",
        "long",
        "trailing",
        "header garbage",
        "too many",
        "more than its bytes hold",
        "newer",
    ],
)
def test_a_crafted_packed_index_is_refused_without_unpacking_more_than_it_may(case: str) -> None:
    """A packed index is one header stream and one records stream, both zlib: a CRC-valid one
    whose streams are not zlib, unpack to fewer or more bytes than its counts say, carry bytes
    after their end, or claim more records than a reader takes is refused (FormatError) before
    any record is used, and never unpacks past what it claims."""
    index = decode_index(build_index())
    head = zlib.compress(json.dumps(index.header).encode())
    body = index.records.tobytes()  # plain rows, packing ignored: only the sizes matter here
    n = len(index.records)
    packed = {
        "garbage": (head, b"not zlib at all", n),
        "short": (head, zlib.compress(body[:-64]), n),
        "long": (head, zlib.compress(body + bytes(64 * 10_000)), n),
        "trailing": (head, zlib.compress(body) + b"extra", n),
        "header garbage": (b"\x78\x9c garbage", zlib.compress(body), n),
        "too many": (head, zlib.compress(body), 2**32 - 1),
        "more than its bytes hold": (head, zlib.compress(body), 20 * len(zlib.compress(body))),
    }
    if case == "newer":
        raw = bytearray(_crafted(2, head, zlib.compress(body), n))
        raw[4] = INDEX_KEPT_DATA + 1
        raw[-4:] = struct.pack("<I", zlib.crc32(bytes(raw[:-4])))
        with pytest.raises(UnsupportedFormatVersion, match=f"version {INDEX_KEPT_DATA + 1}"):
            decode_index(bytes(raw))
        return
    head_bytes, records_bytes, count = packed[case]
    tracemalloc.start()
    said = "can hold" if case in ("too many", "more than its bytes hold") else None
    with pytest.raises(FormatError, match=said):  # a claim no stream can hold: not unpacked
        decode_index(_crafted(2, head_bytes, records_bytes, count))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8 << 20


def test_flipped_bytes_in_a_packed_index_with_its_crc_made_good_raise_only_format_errors() -> None:
    """A fuzz pass over the packed streams (a hostile writer recomputes the CRC): every flip
    is a FormatError, or an index whose records still pass every check; never another
    exception."""
    rng = np.random.default_rng(48)
    good = build_index()
    decoded = outcomes = 0
    for _ in range(400):
        raw = bytearray(good)
        for at in rng.integers(24, len(raw) - 4, size=int(rng.integers(1, 4))):
            raw[int(at)] ^= int(rng.integers(1, 256))
        raw[-4:] = struct.pack("<I", zlib.crc32(bytes(raw[:-4])))
        try:
            index = decode_index(bytes(raw))
        except FormatError:
            outcomes += 1
            continue
        decoded += 1
        assert len(index.records) == 3 and all(
            index.shape_of(i) is not None for i in range(len(index.records))
        )
    assert outcomes + decoded == 400 and outcomes > 300


def test_a_kept_part_is_read_only_from_version_3_and_within_its_own_data() -> None:
    """A part that names its own data object's size is refused in a version 2 index (an older
    writer never wrote one), and in version 3 its records must lie inside that size."""
    merged = decode_index(build_index(INDEX_KEPT_DATA))
    dims = merged.dims
    with pytest.raises(
        FormatError, match=r"a part is not \[seq, session, records, steps, offset\]"
    ):
        decode_index(encode_index(merged.header, merged.records, dims, 2))
    small = {**merged.header, "parts": [[0, "golden", 3, 1, 0, 8]]}
    with pytest.raises(FormatError, match="of a data object of 8 bytes"):
        decode_index(encode_index(small, merged.records, dims, INDEX_KEPT_DATA))
    for bad in ([0, "golden", 3, 1, 0, -1], [0, "golden", 3, 1, 0, 16, 0], [0, "golden", 3, 1]):
        header = {**merged.header, "parts": [bad]}
        with pytest.raises(FormatError, match="a part is not"):
            decode_index(encode_index(header, merged.records, dims, INDEX_KEPT_DATA))
