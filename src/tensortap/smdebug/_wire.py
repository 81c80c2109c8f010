"""The few protocol-buffer messages of an smdebug event file, decoded by hand from the wire
format (no protobuf package, nothing executed): ``Event``, ``Summary``, ``Summary.Value``,
``SummaryMetadata``, ``TensorProto`` and ``TensorShapeProto``, as smdebug 1.0 defines them."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

from tensortap.exceptions import FormatError
from tensortap.format._crc32c import masked_crc32c

# TensorFlow DataType numbers (types.proto) -> NumPy dtypes.
DTYPES: dict[int, Any] = {
    1: np.float32,
    2: np.float64,
    3: np.int32,
    4: np.uint8,
    5: np.int16,
    6: np.int8,
    8: np.complex64,
    9: np.int64,
    10: np.bool_,
    17: np.uint16,
    18: np.complex128,
    19: np.float16,
    22: np.uint32,
    23: np.uint64,
}
STRING = 7


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise FormatError("a truncated or overlong varint in an smdebug event")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    """``(field number, wire type, value)`` of each field of a message: an int for varints, bytes
    for length-delimited fields, raw 4 or 8 bytes for fixed-width ones."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise FormatError(f"wire type {wire} in an smdebug event: not a message smdebug writes")
        if pos > len(data):
            raise FormatError("a truncated field in an smdebug event")
        yield number, wire, value


def tensor(proto: bytes) -> np.ndarray[Any, Any]:
    """A ``TensorProto`` as a NumPy array (numbers from ``tensor_content``; strings as str)."""
    dtype_code, shape, content, strings = 0, [], b"", []
    for number, _, value in fields(proto):
        if number == 1:
            dtype_code = value
        elif number == 2:
            shape = [
                next((v for n, _, v in fields(dim) if n == 1), 0)
                for n, _, dim in fields(value)
                if n == 2
            ]
        elif number == 4:
            content = value
        elif number == 8:
            strings.append(value.decode("utf-8", "replace"))
    if dtype_code == STRING or (strings and not content):
        return np.array(strings, dtype=str)
    np_dtype = DTYPES.get(dtype_code)
    if np_dtype is None:
        raise FormatError(f"an smdebug tensor of TensorFlow dtype {dtype_code}: not supported")
    array = np.frombuffer(content, dtype=np.dtype(np_dtype).newbyteorder("<"))
    count = int(np.prod(shape)) if shape else 1
    if array.size != count:
        raise FormatError(f"an smdebug tensor of shape {shape} holds {array.size} values")
    out: np.ndarray[Any, Any] = array.reshape(shape).copy()
    return out


def summary_values(event: bytes) -> Iterator[tuple[str, np.ndarray[Any, Any], float, int]]:
    """``(tag, array, wall time, step)`` of each tensor value of an ``Event``."""
    wall, step, summary = 0.0, 0, b""
    for number, _, value in fields(event):
        if number == 1:
            wall = struct.unpack("<d", value)[0]
        elif number == 2:
            step = value
        elif number == 5:
            summary = value
    for number, _, value in fields(summary):
        if number != 1:
            continue
        tag, proto = "", None
        for n, _, v in fields(value):
            if n == 1:
                tag = v.decode("utf-8", "replace")
            elif n == 8:
                proto = v
        if proto is not None:
            yield tag, tensor(proto), wall, step


#: What smdebug writes in place of a record's data CRC unless told to compute it (the masked
#: CRC-32C of ``b"0x12345678"``, its ``CHECKSUM_MAGIC_BYTES``): such a record's bytes cannot be
#: verified (its length CRC always can).
NO_CHECKSUM = masked_crc32c(b"0x12345678")


def record_payload(record: bytes | bytearray, where: str = "an smdebug event file") -> bytes:
    """The payload of one TFRecord (8-byte length, 4-byte masked CRC-32C of the length, payload,
    4-byte masked CRC-32C of the payload), both CRCs checked (the data CRC unless it is smdebug's
    placeholder, :data:`NO_CHECKSUM`): FormatError naming ``where`` when the record is cut, does
    not fill its index entry, or its length or data does not match its CRC."""
    if len(record) < 16:
        raise FormatError(f"a truncated record in {where} ({len(record)} bytes, at least 16)")
    (length,) = struct.unpack_from("<Q", record, 0)
    (length_crc,) = struct.unpack_from("<I", record, 8)
    if masked_crc32c(record[:8]) != length_crc:
        raise FormatError(f"a record length in {where} does not match its CRC: the file is corrupt")
    if 12 + length + 4 != len(record):
        raise FormatError(
            f"a record of {length} bytes in {where} does not fill its index entry of "
            f"{len(record)} bytes: the file or its index is corrupt"
        )
    payload = bytes(record[12 : 12 + length])
    (data_crc,) = struct.unpack_from("<I", record, 12 + length)
    if data_crc != NO_CHECKSUM and masked_crc32c(payload) != data_crc:
        raise FormatError(f"a record in {where} does not match its data CRC: the file is corrupt")
    return payload
