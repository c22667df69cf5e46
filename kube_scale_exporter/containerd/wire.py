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


def _complete_varint(buf, pos: int):
    """(value, next position), or None while `buf` ends inside the varint."""
    end = pos
    while end < len(buf) and buf[end] & 0x80:
        end += 1
    return None if end >= len(buf) else _read_varint(buf, pos)


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


class ItemTooLarge(WireError):
    """A value announced longer than the reader's max_item."""


class RepeatedReader:
    """The values of one length-delimited field of a message that arrives in pieces:
    feed(piece) calls on_item(bytes) as each value is complete, skipping other fields as
    they pass, so a message costs one value at a time, never its whole size. A value
    announced longer than `max_item` raises ItemTooLarge before any of it is kept."""

    def __init__(self, number: int, on_item, max_item: int):
        self.number, self.on_item, self.max_item = number, on_item, max_item
        self._head = bytearray()  # a key and a length being read (at most 20 bytes)
        self._item: bytearray | None = None  # the value being collected
        self._need = 0  # bytes of the value still to come
        self._skip = 0  # bytes of another field still to pass over

    def feed(self, data) -> None:
        view = memoryview(data)
        while view:
            if self._skip:
                take = min(self._skip, len(view))
                self._skip -= take
                view = view[take:]
            elif self._item is not None:
                take = min(len(view), self._need)
                self._need -= take
                if self._need or self._item:
                    self._item += view[:take]
                    item = None if self._need else bytes(self._item)
                else:
                    item = bytes(view[:take])  # all in this piece: one copy
                view = view[take:]
                if item is not None:
                    self._item = None
                    self.on_item(item)
            elif not self._head and len(view) >= 20:  # a whole key and length at hand
                pos = self._start(view)
                if pos is None:
                    raise WireError("overlong varint")
                view = view[pos:]
            else:
                self._head.append(view[0])
                view = view[1:]
                if len(self._head) > 20:
                    raise WireError("overlong varint")
                if self._start(self._head) is not None:
                    self._head.clear()

    def _start(self, buf) -> int | None:
        """Begin the field whose key (and length) start `buf`: the bytes they took, or
        None while `buf` ends inside them."""
        got = _complete_varint(buf, 0)
        if got is None:
            return None
        key, pos = got
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        if wire_type in (VARINT, LENGTH):
            got = _complete_varint(buf, pos)
            if got is None:
                return None
            size, pos = (got[0] if wire_type == LENGTH else 0), got[1]
        elif wire_type in (FIXED64, FIXED32):
            size = 8 if wire_type == FIXED64 else 4
        else:
            raise WireError(f"field {number} has unsupported wire type {wire_type}")
        if number != self.number or wire_type != LENGTH:
            self._skip = size
        elif size > self.max_item:
            raise ItemTooLarge(f"an item of {size} bytes, over the {self.max_item >> 10} KiB cap")
        elif size:
            self._item, self._need = bytearray(), size
        else:
            self.on_item(b"")
        return pos

    def end(self) -> None:
        """The message is over: it must not stop inside a field."""
        if self._head or self._item is not None or self._skip:
            raise WireError("message ends inside a field")


def int64(values: list, default: int = 0) -> int:
    """The last value of a varint int64 field (the last one wins, as in protobuf)."""
    if not values:
        return default
    value = values[-1]
    if not isinstance(value, int):
        raise WireError("a length-delimited field where an integer belongs")
    return value - (1 << 64) if value >= 1 << 63 else value


def _length_delimited(value):
    if isinstance(value, int):
        raise WireError("an integer field where a string or message belongs")
    return value


def string(values: list, default: str = "") -> str:
    # str() decodes bytes and memoryviews alike.
    return str(_length_delimited(values[-1]), "utf-8", "replace") if values else default


def timestamp(values: list) -> float | None:
    """google.protobuf.Timestamp (seconds = 1, nanos = 2) as Unix seconds; None if unset."""
    if not values:
        return None
    ts = fields(_length_delimited(values[-1]))
    return int64(ts[1]) + int64(ts[2]) / 1e9


def string_map(values: list) -> dict[str, str]:
    """map<string, string>: each entry is a message with key = 1 and value = 2."""
    out = {}
    for entry in values:
        kv = fields(_length_delimited(entry))
        out[string(kv[1])] = string(kv[2])
    return out
