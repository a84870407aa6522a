"""Protocol Buffers' wire format, the few pieces rnnx needs to stream an ONNX file's tensors
without holding them in a message (https://protobuf.dev/programming-guides/encoding/).

A message is a sequence of records, each a key (``field << 3 | wire type``) and a value; a
parser accepts records in any order, and an embedded message's records are length-prefixed.
So a large ``bytes`` field can be written from a memory map straight to the file, and read
back as an offset into the file, as long as every enclosing length is known in advance.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from rnnx.errors import RNNXError

VARINT, I64, LEN, I32 = 0, 1, 2, 5
_MAX_VARINT_BYTES = 10


def varint(value: int) -> bytes:
    """The varint encoding of a non-negative integer."""
    if value < 0:
        raise ValueError("varint: negative values are encoded as 10-byte two's complement, which rnnx never writes")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def key(field: int, wire_type: int = LEN) -> bytes:
    return varint(field << 3 | wire_type)


def len_header(field: int, length: int) -> bytes:
    """The key and length prefix of a length-delimited record of ``length`` bytes."""
    return key(field, LEN) + varint(length)


def read_varint(buf: memoryview | bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it); a varint running past ``end`` or over 10 bytes is damage."""
    value = shift = 0
    for k in range(_MAX_VARINT_BYTES):
        if pos + k >= end:
            raise RNNXError("protobuf: a varint runs past the end of its message; the file is damaged")
        byte = buf[pos + k]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos + k + 1
        shift += 7
    raise RNNXError("protobuf: a varint is over 10 bytes long; the file is damaged")


class Record(NamedTuple):
    field: int
    wire_type: int
    start: int  # the record's first byte (its key)
    value_start: int  # a LEN record's payload, or a scalar's bytes
    end: int  # one past the record
    value: int  # a VARINT's value (0 for the others)


def records(buf: memoryview | bytes, start: int, end: int) -> Iterator[Record]:
    """Every record of the message in ``buf[start:end]``, each checked to lie inside it."""
    pos = start
    while pos < end:
        k, at = read_varint(buf, pos, end)
        field, wire = k >> 3, k & 7
        value = 0
        if wire == VARINT:
            value, stop = read_varint(buf, at, end)
        elif wire == LEN:
            length, at = read_varint(buf, at, end)
            stop = at + length
        elif wire == I64:
            stop = at + 8
        elif wire == I32:
            stop = at + 4
        else:  # groups (3, 4) are deprecated and ONNX has none; 6 and 7 do not exist
            raise RNNXError(f"protobuf: wire type {wire} at byte {pos}; the file is damaged or not ONNX")
        if field == 0 or stop > end:
            raise RNNXError(f"protobuf: a record at byte {pos} runs past the end of its message; the file is damaged")
        yield Record(field, wire, pos, at, stop, value)
        pos = stop
