"""containerd's content-store ingest directory through containerd/ingestdir.py, as the
ingest source reads it every scrape.

An input is a directory of ingests: entries separated by ENTRY (two NUL bytes), each the
fields NAME, ref, startedat, updatedat, total, data separated by one NUL byte. The
harness makes NAME (made safe as a file name) a directory holding each file whose field
is there; a field of ABSENT leaves the file out, DIRECTORY makes a directory and FIFO a
FIFO in its place, and an entry of NAME alone is a stray regular file beside the
ingests. The data field is the blob's size and data's mtime ("SIZE" or "SIZE@NANOS"):
the parser only stats data, so the harness makes a sparse file of that size (the
captures record what containerd had written, not its bytes). Seeds are the directories
of containerd 1.7, 2.3 and 2.4 pulling from a local registry (`python -m fuzz.capture
ingest`).

Documented error: IngestDirError, whose message names the directory. Invariants: every
ingest is one of an entry of the namespace (its ref the key past "NAMESPACE/N/"), its
offset the size of a regular data file, its total an int >= 0, its times finite and its last update no
earlier than data's mtime; the list is sorted by ref and no longer than the entries.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import stat

from fuzz import InvariantBroken, scratch
from kube_scale_exporter.containerd.ingestdir import IngestDir, IngestDirError

TARGETS = ("kube_scale_exporter.containerd.ingestdir", "kube_scale_exporter.files")
NAMESPACE = "k8s.io"
ENTRY, FIELD = b"\0\0", b"\0"
FILES = ("ref", "startedat", "updatedat", "total", "data")
ABSENT, DIRECTORY, FIFO = b"\x01", b"\x02", b"\x03"
# Entries an input makes, and the largest sparse data file (tmpfs holds no blocks of it).
MAX_ENTRIES = 32
MAX_DATA = 1 << 40
_UNSAFE = re.compile(rb"[^A-Za-z0-9._-]")
_DATA = re.compile(rb"(\d{1,15})(?:@(\d{1,20}))?")

_own = ""


def prepare() -> None:
    global _own
    _own = scratch("ingest")


def encode(entries: list[dict[str, bytes | None]]) -> bytes:
    """An input of entries {"name": ..., "ref": ..., ...}; a file left out is ABSENT."""
    return ENTRY.join(
        FIELD.join([entry["name"], *(entry.get(f, ABSENT) or ABSENT for f in FILES)])
        for entry in entries
    )


def _made(data: bytes, root: str) -> dict[str, dict]:
    """Write the input's directory at root: {entry name: {file: what was written}}."""
    made = {}
    for i, entry in enumerate(data.split(ENTRY)[:MAX_ENTRIES]):
        name_field, *fields = entry.split(FIELD)
        name = _UNSAFE.sub(b"_", name_field[:64]).decode() or f"e{i}"
        if name in made or name in (".", ".."):
            name = f"{name}.{i}"
        where = os.path.join(root, name)
        if not fields:
            with open(where, "wb") as f:
                f.write(name_field)
            made[name] = None
            continue
        os.mkdir(where)
        files = {}
        for file_name, value in zip(FILES, fields, strict=False):
            path = os.path.join(where, file_name)
            if value == ABSENT:
                continue
            if value == DIRECTORY:
                os.mkdir(path)
            elif value == FIFO:
                os.mkfifo(path)
            elif file_name == "data" and (size := _DATA.fullmatch(value)):
                with open(path, "wb") as f:
                    f.truncate(min(int(size[1]), MAX_DATA))
                if size[2]:
                    os.utime(path, ns=(int(size[2]), min(int(size[2]), 1 << 62)))
            else:
                with open(path, "wb") as f:
                    f.write(value)
            files[file_name] = value
        made[name] = files
    return made


def check(data: bytes) -> None:
    root = os.path.join(_own, "ingest")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    made = _made(data, root)
    try:
        got = IngestDir(root, NAMESPACE).ingests()
    except IngestDirError as exc:
        if root not in str(exc):
            raise InvariantBroken(f"error names no path: {exc}") from None
        return
    keys = {}
    for name, files in made.items():
        key = (files or {}).get("ref")
        if key is not None and key not in (DIRECTORY, FIFO):
            keys.setdefault(key.decode("utf-8", "replace"), []).append(name)
    if len(got) > sum(len(n) for k, n in keys.items() if k.startswith(NAMESPACE + "/")):
        raise InvariantBroken(f"{len(got)} ingests of {len(made)} entries")
    if [i.ref for i in got] != sorted(i.ref for i in got):
        raise InvariantBroken("not sorted by ref")
    for ingest in got:
        _valid(ingest, keys, root)


def _valid(ingest, keys: dict[str, list[str]], root: str) -> None:
    names = [
        n
        for key, names in keys.items()
        if key.startswith(NAMESPACE + "/")
        and key[len(NAMESPACE) + 1 :].partition("/")[2] == ingest.ref
        for n in names
    ]
    if not names:
        raise InvariantBroken(f"{ingest.ref!r}: no entry of the namespace has that ref")
    stats = []
    for name in names:
        with contextlib.suppress(FileNotFoundError):  # another entry of the same ref
            stats.append(os.stat(os.path.join(root, name, "data")))
    if not any(
        stat.S_ISREG(s.st_mode)
        and s.st_size == ingest.offset
        and ingest.updated_at >= s.st_mtime_ns / 1e9
        for s in stats
    ):
        raise InvariantBroken(f"{ingest}: offset or last update unlike a regular data file's")
    if not isinstance(ingest.total, int) or ingest.total < 0:
        raise InvariantBroken(f"{ingest.ref!r}: total {ingest.total!r}")
    for when in (ingest.started_at, ingest.updated_at):
        if when is not None and not math.isfinite(when):
            raise InvariantBroken(f"{ingest.ref!r}: time {when!r}")
