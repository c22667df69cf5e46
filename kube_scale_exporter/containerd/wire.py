"""The protobuf wire format, only as far as containerd's few list messages need it.

We read five message types from containerd and write three one-field requests, so a
full protobuf runtime and generated stubs would cost more than they save (see
docs/imagepull.md). Unknown fields are skipped, as protobuf requires, so newer
containerd versions that add fields still decode.
"""

from __future__ import annotations

from collections import defaultdict

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message."""


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1  # negative int64 values travel as ten-byte two's complement
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def encode_strings(field: int, values) -> bytes:
    """A message whose only content is a repeated string field (containerd's filters)."""
    out = bytearray()
    for value in values:
        data = value.encode()
        out += _varint(field << 3 | LENGTH) + _varint(len(data)) + data
    return bytes(out)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise WireError("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def fields(buf) -> dict[int, list]:
    """Field number -> values in order: ints for varint/fixed, bytes (or views of a
    memoryview) for length-delimited."""
    out: dict[int, list] = defaultdict(list)
    for number, value in iter_fields(buf):
        out[number].append(value)
    return out


def repeated(buf, number: int):
    """The values of one field as they are decoded: a reply's items one at a time, so a
    caller can stop at a count before they all exist."""
    return (value for n, value in iter_fields(buf) if n == number)


def iter_fields(buf):
    """(field number, value) in order; slices of a memoryview stay views (no copy)."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _read_varint(buf, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        if wire_type == VARINT:
            value, pos = _read_varint(buf, pos)
        elif wire_type == LENGTH:
            size, pos = _read_varint(buf, pos)
            if pos + size > end:
                raise WireError(f"field {number} runs past the end of the message")
            value, pos = buf[pos : pos + size], pos + size
        elif wire_type == FIXED64:
            value, pos = int.from_bytes(buf[pos : pos + 8], "little"), pos + 8
        elif wire_type == FIXED32:
            value, pos = int.from_bytes(buf[pos : pos + 4], "little"), pos + 4
        else:
            raise WireError(f"field {number} has unsupported wire type {wire_type}")
        if pos > end:
            raise WireError(f"field {number} runs past the end of the message")
        yield number, value


def int64(values: list, default: int = 0) -> int:
    """The last value of a varint int64 field (the last one wins, as in protobuf)."""
    if not values:
        return default
    value = values[-1]
    return value - (1 << 64) if value >= 1 << 63 else value


def string(values: list, default: str = "") -> str:
    # str() decodes bytes and memoryviews alike.
    return str(values[-1], "utf-8", "replace") if values else default


def timestamp(values: list) -> float | None:
    """google.protobuf.Timestamp (seconds = 1, nanos = 2) as Unix seconds; None if unset."""
    if not values:
        return None
    ts = fields(values[-1])
    return int64(ts[1]) + int64(ts[2]) / 1e9


def string_map(values: list) -> dict[str, str]:
    """map<string, string>: each entry is a message with key = 1 and value = 2."""
    out = {}
    for entry in values:
        kv = fields(entry)
        out[string(kv[1])] = string(kv[2])
    return out
