"""JSON values one at a time from a stream of bytes, holding only the value being read:
what kube/listing.py decodes a list page with, item by item as it arrives.

Values are parsed with json.JSONDecoder.raw_decode over a sliding buffer of Latin-1 text
(one character a byte, so the caps count bytes). A value cut by the end of the buffer is
parsed again only once the buffered text has doubled; past LONG_VALUE bytes its end is
found as its text arrives (_Extent: brackets outside strings) and it is parsed once, so
a value with no end costs its text up to MAX_ITEM_BYTES, not copies of it.
"""

from __future__ import annotations

import json
import re

from .client import (
    MAX_OBJECT_VALUES,
    ReplyTooLarge,
    check_values,
    count_values,
    too_many_values,
)

# One value as JSON (a list item): an object is at most etcd's --max-request-bytes
# (1.5 MiB by default) as stored; JSON escaping adds a little. The same bound as one
# watch event (MAX_WATCH_LINE), and the bound on whitespace between two values.
MAX_ITEM_BYTES = 4 << 20
# Past this many bytes a value still incomplete is no longer parsed to see whether it is
# whole: its end is found as its text arrives (_Extent), and it is parsed once.
LONG_VALUE = 256 << 10
HERE = "kube_scale_exporter/kube/jsonstream.py"

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_NUMBER_GOES_ON = frozenset(".eE+-0123456789")
_STRUCTURE = re.compile(r'["{}\[\]]')
_STRING_STOP = re.compile(r'["\\]')


class Reader:
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

    def _next_text(self) -> str | None:
        """The next piece as text; None at the end of the stream."""
        chunk = next(self._chunks, None)
        self.ended = chunk is None
        # Latin-1: one character a byte, so the caps count bytes and a buffer never takes
        # 4 bytes a character. UTF-8's multibyte sequences are all >= 0x80, never a quote,
        # backslash or bracket: values end where they end in UTF-8 (see _utf8()).
        return None if self.ended else chunk.decode("latin-1")

    def _fill(self) -> bool:
        """Drop what is read, add the next piece; False at the end of the stream."""
        if self.ended:
            return False
        if len(self.buf) - self.pos > MAX_ITEM_BYTES:
            raise self._too_large()
        self.buf, self.pos = self.buf[self.pos :] + (self._next_text() or ""), 0
        return True

    def _fill_to(self, want: int) -> None:
        """Add pieces until `want` characters from pos are buffered or the stream ends,
        joined once (small pieces must not copy the buffer each)."""
        pieces, have = [self.buf[self.pos :]], len(self.buf) - self.pos
        while have < want and not self.ended:
            if have > MAX_ITEM_BYTES:
                raise self._too_large()
            text = self._next_text() or ""
            pieces.append(text)
            have += len(text)
        self.buf, self.pos = "".join(pieces), 0

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
        """The next JSON value, read until complete: parsed again only when the buffered
        text has doubled, and past LONG_VALUE bytes its end is found as its text arrives
        and it is parsed once (a value with no end costs its text, not copies of it)."""
        self.peek()
        while True:
            tried = len(self.buf) - self.pos
            if tried > LONG_VALUE and not self.ended and self.buf[self.pos] in '{["':
                return self._long_value()
            try:
                check_values(self.buf, self.pos, self.what)  # before decoding, even in part
                value, end = _DECODER.raw_decode(self.buf, self.pos)
                if self.ended or not _may_go_on(value, self.buf, end):
                    start, self.pos = self.pos, end
                    return self._utf8(value, self.buf, start, end)
            except json.JSONDecodeError as exc:
                if self.ended or not _incomplete(exc, len(self.buf)):
                    raise ValueError(f"{self.what}: not JSON: {exc}") from None
            except (ValueError, RecursionError) as exc:  # nested too deep, 5,000 digits
                raise ValueError(f"{self.what}: JSON we cannot read: {exc}") from None
            self._fill_to(2 * tried)

    def _long_value(self):
        """An object, array or string longer than LONG_VALUE: its pieces are kept as they
        come until _Extent finds its end, then joined and parsed once."""
        extent, start = _Extent(), self.pos
        end = extent.end(self.buf, start)
        if end is not None:
            self.pos = end
            return self._parse(self.buf[start:end])
        pieces, size = [self.buf[start:]], len(self.buf) - start
        values = count_values(pieces[0])
        self.buf, self.pos = "", 0
        try:
            while end is None:
                if size > MAX_ITEM_BYTES:
                    raise self._too_large()
                if values > MAX_OBJECT_VALUES:  # counted before each piece is scanned
                    raise too_many_values(self.what)
                text = self._next_text()
                if text is None:
                    raise ValueError(f"{self.what}: the list reply ends early")
                values += count_values(text)
                end = extent.end(text)
                pieces.append(text if end is None else text[:end])
                size += len(pieces[-1])
            self.buf = text[end:]
            whole = "".join(pieces)
        finally:
            pieces.clear()  # not kept by a traceback's reference cycle either
        return self._parse(whole)

    def _parse(self, text: str):
        """The one JSON value that is all of `text`."""
        try:
            check_values(text, 0, self.what)
            value, end = _DECODER.raw_decode(text)
            if end != len(text):
                raise json.JSONDecodeError("Extra data", text, end)
            return self._utf8(value, text, 0, end)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{self.what}: not JSON: {exc}") from None
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"{self.what}: JSON we cannot read: {exc}") from None

    @staticmethod
    def _utf8(value, text: str, start: int, end: int):
        """`value` decoded from text[start:end] as the UTF-8 it was: only ASCII reads the
        same in Latin-1 (isascii() is a flag of the string, so the slice is made only when
        the text is not all ASCII)."""
        if text.isascii() or (part := text[start:end]).isascii():
            return value
        return json.loads(part.encode("latin-1"))


class _Extent:
    """Where a JSON object, array or string ends, found as its text arrives: brackets are
    counted outside strings, and a backslash in a string hides the character after it."""

    def __init__(self):
        self.depth, self.in_string, self.skip = 0, False, 0

    def end(self, text: str, i: int = 0) -> int | None:
        """The index just past the value's end in `text`, or None if it goes on."""
        i, self.skip = i + self.skip, 0
        while i < len(text):
            if self.in_string:
                found = _STRING_STOP.search(text, i)
                if found is None:
                    return None
                i = found.end()
                if found.group() == "\\":
                    i += 1  # the escaped character, whatever it is
                    continue
                self.in_string = False
                if not self.depth:
                    return i
            else:
                found = _STRUCTURE.search(text, i)
                if found is None:
                    return None
                i, char = found.end(), found.group()
                if char == '"':
                    self.in_string = True
                elif char in "{[":
                    self.depth += 1
                else:
                    self.depth -= 1
                    if not self.depth:
                        return i
        self.skip = i - len(text)  # an escape ending the text hides the next one's first
        return None


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
