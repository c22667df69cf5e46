"""Coverage-guided fuzzing of the parsers that read what an attacker or a broken peer sends.

Each harness is a module here holding

    TARGETS = ("kube_scale_exporter.x.y", ...)  # the parser's modules: coverage is theirs
    INSTRUMENT = ("h2", ...)                    # optional: libraries instrumented too
    def prepare() -> None: ...                  # optional: set-up once a process, untimed
    def check(data: bytes) -> None: ...         # the parser run on `data`, invariants checked

`check` swallows only the exceptions the parser documents for bad input and raises on
anything else: another exception, a broken invariant (a round trip that differs, a value
out of its range), an answer unlike the reference's. It runs under plain Python, so
`python -m fuzz replay` (`make fuzz-replay`) needs no atheris, and under atheris
(`python -m fuzz run`, `make fuzz`), which instruments TARGETS and INSTRUMENT and bounds
each input's time and the process' memory. Every module here with a `check` is a
harness: a new parser gets one by adding
fuzz/NAME.py and its seeds in fuzz/corpus/NAME/.

fuzz/corpus/NAME/ holds the seeds: replies and files captured from real components
(`python -m fuzz.capture`, as root), each input that once broke an invariant, and a
small set of inputs the fuzzer found that reach code the captures do not.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib
import io
import os
import pkgutil
import shutil
import zlib
from pathlib import Path

from kube_scale_exporter import httpclient

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
# Where harnesses write the files and sockets an input becomes: tmpfs, as a write to
# disk costs more than the parse (a fixed path: seeds name files under it).
SCRATCH = "/dev/shm/kse-fuzz"
# Modules here that are not harnesses.
_TOOLS = {"__main__", "capture"}


def scratch(name: str) -> str:
    """SCRATCH/NAME-PID, this process' own (concurrent runs never share files); those of
    processes that are gone are removed first."""
    os.makedirs(SCRATCH, exist_ok=True)
    for entry in os.listdir(SCRATCH):
        pid = entry.removesuffix(".sock").rpartition("-")[2]
        if pid.isdigit() and not _alive(int(pid)):
            path = os.path.join(SCRATCH, entry)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):  # another process' sweep
                    os.unlink(path)
    return f"{SCRATCH}/{name}-{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def harness_names() -> list[str]:
    names = []
    for info in pkgutil.iter_modules([str(HERE)]):
        if info.name not in _TOOLS and hasattr(
            importlib.import_module(f"fuzz.{info.name}"), "check"
        ):
            names.append(info.name)
    return sorted(names)


def corpus_files(name: str) -> list[Path]:
    folder = CORPUS / name
    return sorted(p for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []


def piece_sizes(data: bytes) -> tuple[int, ...]:
    """Sizes to cut `data` into for a parser fed in pieces, derived from the data itself:
    the same input cuts the same way in every replay, and a mutation moves the cuts."""
    crc = zlib.crc32(data)
    # At most ~128 pieces of a large input: more only cost time, the cuts fall anywhere.
    least = len(data) // 128
    sizes = [max(least, 1 + crc % 61), max(least, 1 + (crc >> 8) % 4099)]
    if len(data) <= 2048:
        sizes.append(1)
    return tuple(sizes)


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


class InvariantBroken(AssertionError):
    """The parser accepted the input but what it made of it is wrong."""


class _Pieces(io.RawIOBase):
    """A reply body that arrives in the given pieces, one a read."""

    def __init__(self, parts):
        self.parts = list(parts)

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        data = self.read1(len(buf))
        buf[: len(data)] = data
        return len(data)

    def read1(self, size: int = -1) -> bytes:
        if not self.parts:
            return b""
        part = self.parts.pop(0)
        if 0 < size < len(part):
            self.parts.insert(0, part[size:])
            part = part[:size]
        return part


class _Socket:
    """What http.client reads a reply from: the pieces, one a read."""

    def __init__(self, parts):
        self.parts = parts

    def makefile(self, mode):
        return io.BufferedReader(_Pieces(self.parts))


def http_reply(parts, status: int = 200, headers: dict | None = None) -> httpclient.Response:
    """An httpclient Response whose body is `parts` as they come off a socket, after a
    head that http.client parses: what the backends' readers (limits.py) take, without a
    server. The body ends where the parts do (no Content-Length, as a closed stream)."""
    head = f"HTTP/1.1 {status} Fuzz\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    raw = http.client.HTTPResponse(_Socket([(head + "Connection: close\r\n\r\n").encode(), *parts]))
    raw.begin()
    return httpclient.Response(None, None, None, None, raw, "http://fuzz/", 5.0)
