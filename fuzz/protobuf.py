"""A protobuf message from containerd through the wire codec (containerd/wire.py) and the
client's decoders of its items (containerd/client.py).

Documented error: WireError (ItemTooLarge among them) for bytes that are not a
well-formed message. Invariants: RepeatedReader, fed the message in pieces of any size,
yields exactly the length-delimited values of field 1 that iter_fields reads from the
whole message, and fails where iter_fields fails; each item decodes as an Ingest, a
ContentInfo or an image name, or raises WireError; encode_strings and the varint encoder
round-trip through the decoder.
"""

from __future__ import annotations

import math

from fuzz import InvariantBroken, piece_sizes, pieces
from kube_scale_exporter.containerd import client, wire

TARGETS = ("kube_scale_exporter.containerd.wire", "kube_scale_exporter.containerd.client")


def check(data: bytes) -> None:
    try:
        whole = list(wire.iter_fields(memoryview(data)))
    except wire.WireError:
        whole = None
    expected = (
        None if whole is None else [bytes(v) for n, v in whole if n == 1 and not isinstance(v, int)]
    )
    for size in piece_sizes(data):
        _streamed(data, size, expected)
    for item in expected or ():
        _decoded(item)
    _round_trips(data)


def _streamed(data: bytes, size: int, expected) -> None:
    items: list[bytes] = []
    reader = wire.RepeatedReader(1, items.append, max_item=len(data))
    try:
        for piece in pieces(data, size):
            reader.feed(piece)
        reader.end()
    except wire.WireError as exc:
        if expected is not None:
            raise InvariantBroken(f"in pieces of {size}: {exc}; whole, it decodes") from None
        return
    if items != expected:
        raise InvariantBroken(f"in pieces of {size}: {items[:3]!r}... whole: {expected!r:.200}")


def _decoded(item: bytes) -> None:
    for decode in (client._ingest, client._content_info, _image_name):
        try:
            value = decode(memoryview(item))
        except wire.WireError:
            continue
        for number in _numbers(value):
            if not math.isfinite(number):
                raise InvariantBroken(f"{decode.__name__} gave {number}")


def _image_name(item) -> str:
    return wire.string(wire.fields(item)[1])


def _numbers(value):
    if isinstance(value, str):
        return []
    found = [value.size] if isinstance(value, client.ContentInfo) else [value.offset, value.total]
    for name in ("created_at", "started_at", "updated_at"):
        if getattr(value, name, None) is not None:
            found.append(getattr(value, name))
    return found


def _round_trips(data: bytes) -> None:
    strings = data.decode("utf-8", "replace").split("\x00")[:64]
    got = [wire.string([v]) for n, v in wire.iter_fields(wire.encode_strings(1, strings))]
    if got != strings:
        raise InvariantBroken(f"encode_strings round trip: {got!r:.200} != {strings!r:.200}")
    for i in range(0, len(data) - 7, 8):
        value = int.from_bytes(data[i : i + 8], "little", signed=True)
        decoded, end = wire._read_varint(wire._varint(value), 0)
        if wire.int64([decoded]) != value:
            raise InvariantBroken(f"varint round trip of {value}: {decoded}")
