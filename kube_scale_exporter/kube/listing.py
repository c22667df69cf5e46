"""One list of a resource: its pages fetched with limit/continue (or one page from the API
server's watch cache), each decoded item by item as it streams in.

A page read whole before json.loads sees it costs its size in RSS: a page of 500 pods is
tens of MB, and a hostile or broken server's endless page cost its 32 MiB cap. Here each
item of `items` is decoded on its own from a sliding buffer and handed on at once
(transformed: the cache keeps only what its collector reads), so a page costs about one
object however large the page: at most MAX_ITEM_BYTES of text buffered, and no more items
than the page's limit (docs/reliability.md has the measurements).
"""

from __future__ import annotations

import json
import re

from .client import KubeClient, ReplyTooLarge, check_values

# One item as JSON: an object is at most etcd's --max-request-bytes (1.5 MiB by default)
# as stored; JSON escaping adds a little. The same bound as one watch event
# (MAX_WATCH_LINE), and the bound on whitespace between two values.
MAX_ITEM_BYTES = 4 << 20
# Items in one page from the watch cache, which ignores limit (node mode: this node's
# pods, 110 by default and a few hundred where kubelets are tuned for more).
MAX_UNPAGED_ITEMS = 5_000
HERE = "kube_scale_exporter/kube/listing.py"

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_NUMBER_GOES_ON = frozenset(".eE+-0123456789")


def object_key(obj) -> str:
    meta = obj.get("metadata", {})
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else meta["name"]


def strip_managed_fields(obj):
    # Server-side-apply bookkeeping: often half an object's size and never read here.
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


def list_all(client: KubeClient, path, selectors, transform, from_cache, page_size):
    """({key: transform(item)}, the list's resourceVersion), every page followed.

    `from_cache` lists from the API server's watch cache (resourceVersion=0), which
    ignores paging: the cheap choice for thousands of node-filtered informers. A continue
    token the server no longer holds raises Gone (410 Expired): the caller lists again."""
    params = dict(selectors)
    if from_cache:
        # Relists too: 7,500 nodes relisting after a 410 must not each read etcd.
        params["resourceVersion"] = "0"
        cap = (MAX_UNPAGED_ITEMS, f"MAX_UNPAGED_ITEMS in {HERE}")
    else:
        params["limit"] = str(page_size)
        cap = (page_size, f"limit={page_size} was asked")
    fresh = {}

    def keep(item):
        item = transform(item)
        fresh[object_key(item)] = item

    while True:
        meta = client.stream(path, params, lambda chunks: decode(chunks, keep, cap, path))
        if not meta.get("continue"):
            return fresh, meta.get("resourceVersion")
        params = dict(params, **{"continue": meta["continue"]})


def decode(chunks, on_item, cap: tuple[int, str], what: str) -> dict:
    """Read a list reply from `chunks` (its bytes in any pieces), calling on_item(item) for
    each of its `items` as soon as it is complete; returns the list's metadata. Raises
    ValueError for a reply that is not a list object, ReplyTooLarge past MAX_ITEM_BYTES or
    past cap = (items, why that many)."""
    reader = _Reader(chunks, what)
    try:
        return _list_object(reader, on_item, cap)
    except BaseException:
        # The traceback keeps these frames in a reference cycle until a full collection:
        # it must not keep the buffered text too, on every failing list.
        reader.buf = ""
        raise


def _list_object(reader, on_item, cap) -> dict:
    reader.expect("{")
    metadata, count = {}, 0
    more = reader.peek() != "}"
    if not more:
        reader.expect("}")
    while more:
        if reader.peek() != '"':
            raise reader.error("a member name")
        key = reader.value()
        reader.expect(":")
        if key == "items" and reader.peek() == "[":
            count = _items(reader, on_item, cap, count)
        else:
            value = reader.value()
            if key == "metadata" and isinstance(value, dict):
                metadata = value
            elif key == "items" and value is not None:
                raise reader.error("items as a list")
        more = reader.either(",}") == ","
    reader.expect_end()
    return metadata


def _items(reader, on_item, cap, count) -> int:
    """on_item(item) for each item of the array at hand; the count of items so far."""
    reader.expect("[")
    more = reader.peek() != "]"
    if not more:
        reader.expect("]")
    while more:
        count += 1
        if count > cap[0]:
            raise ReplyTooLarge(f"{reader.what}: a page of more than {cap[0]} items ({cap[1]})")
        on_item(reader.value())
        more = reader.either(",]") == ","
    return count


class _Reader:
    """JSON values one at a time from a stream of bytes, holding only the value being read
    (and the rest of the last piece)."""

    def __init__(self, chunks, what):
        self._chunks = iter(chunks)
        self.what = what
        self.buf, self.pos, self.ended = "", 0, False

    def _too_large(self) -> ReplyTooLarge:
        return ReplyTooLarge(
            f"{self.what}: a value over the {MAX_ITEM_BYTES >> 20} MiB cap "
            f"(MAX_ITEM_BYTES in {HERE})"
        )

    def _fill(self) -> bool:
        """Drop what is read, add the next piece; False at the end of the stream."""
        if self.ended:
            return False
        if len(self.buf) - self.pos > MAX_ITEM_BYTES:
            raise self._too_large()
        chunk = next(self._chunks, None)
        self.ended = chunk is None
        # Latin-1: one character a byte, so the caps count bytes and a buffer never takes
        # 4 bytes a character. UTF-8's multibyte sequences are all >= 0x80, never a quote,
        # backslash or bracket: values end where they end in UTF-8 (see value()).
        self.buf, self.pos = self.buf[self.pos :] + (chunk or b"").decode("latin-1"), 0
        return True

    def error(self, wanted: str) -> ValueError:
        return ValueError(f"{self.what}: expected {wanted} at {self.buf[self.pos :][:40]!r}")

    def peek(self) -> str:
        """The next character that is not whitespace; ValueError at the end."""
        skipped = 0
        while True:
            start = self.pos
            self.pos = _WHITESPACE.match(self.buf, start).end()
            skipped += self.pos - start
            if skipped > MAX_ITEM_BYTES:  # read and dropped, but not for ever
                raise self._too_large()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                raise ValueError(f"{self.what}: the list reply ends early")

    def expect(self, char: str) -> None:
        if self.peek() != char:
            raise self.error(repr(char))
        self.pos += 1

    def either(self, chars: str) -> str:
        """The next character, one of `chars` (a separator or a closing bracket)."""
        got = self.peek()
        if got not in chars:
            raise self.error(" or ".join(map(repr, chars)))
        self.pos += 1
        return got

    def expect_end(self) -> None:
        try:
            self.peek()
        except ValueError:
            return
        raise ValueError(f"{self.what}: data after the list reply")

    def value(self):
        """The next JSON value, read until complete (parsed again only when the buffered
        text has doubled, so a large value costs a few parses, not one per piece)."""
        self.peek()
        while True:
            tried = len(self.buf) - self.pos
            check_values(self.buf, self.pos, self.what)  # before decoding, even in part
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
                if self.ended or not _may_go_on(value, self.buf, end):
                    start, self.pos = self.pos, end
                    # Only ASCII reads the same in Latin-1 and UTF-8; isascii() is a flag
                    # of the string, so the slice is made only when the buffer is not.
                    if self.buf.isascii() or (text := self.buf[start:end]).isascii():
                        return value
                    return json.loads(text.encode("latin-1"))
            except json.JSONDecodeError as exc:
                if self.ended or not _incomplete(exc, len(self.buf)):
                    raise ValueError(f"{self.what}: not JSON: {exc}") from None
            except (ValueError, RecursionError) as exc:  # nested too deep, 5,000 digits
                raise ValueError(f"{self.what}: JSON we cannot read: {exc}") from None
            while len(self.buf) - self.pos < 2 * tried and self._fill():
                pass


def _may_go_on(value, text: str, end: int) -> bool:
    """Whether a decoded number may be cut short ("12" of "12.5e3" in the next piece);
    strings, arrays, objects and literals end with their last character."""
    if type(value) not in (int, float):
        return False
    return end == len(text) or text[end] in _NUMBER_GOES_ON


def _incomplete(exc: json.JSONDecodeError, length: int) -> bool:
    """Whether the text may only be cut short: the decoder stopped near its end (the
    longest token it reports from its start is a surrogate pair escape, 12 characters)
    or in a string still open."""
    return exc.pos >= length - 16 or exc.msg.startswith("Unterminated string")
