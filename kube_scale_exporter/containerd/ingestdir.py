"""containerd's active downloads read from its content store's ingest directory, no socket.

containerd's local content store (io.containerd.content.v1.content under its root)
keeps each unfinished blob write in ingest/<sha256 of its key>/, with the files:

    ref        the key: "<namespace>/<n>/<ref>", e.g. "k8s.io/1/layer-sha256:..."
    startedat  RFC 3339 time with nanoseconds, when the write began
    updatedat  the same, rewritten only now and then (at open and close)
    total      the blob's expected size in decimal; absent when unknown
    data       the bytes written so far

containerd's own Content.ListStatuses answers from these files: the offset is data's
size, the last update the later of updatedat and data's mtime (it writes data on every
chunk but updatedat rarely). Checked on trixie's 1.7.24, 2.3.7 and 2.4.2 (and on 1.6.20
and 2.1.9 before them), client pulls and the 2.x transfer service alike
(tests/imagepull/test_ingest.py).
containerd creates the directories 0755 and the files 0644 (under the usual umask 022),
so a read-only mount of ingest/ alone is readable by any uid, while containerd's root
above it is 0700.
"""

from __future__ import annotations

import errno
import os
import stat
from datetime import datetime

from kube_scale_exporter.containerd.client import Ingest
from kube_scale_exporter.files import FileRefused, read_capped

DEFAULT_INGEST_DIR = "/var/lib/containerd/io.containerd.content.v1.content/ingest"
HERE = "kube_scale_exporter/containerd/ingestdir.py"
# A key is a namespace, a number and a pull's ref ("layer-sha256:" and 64 hex): ~90 bytes.
REF_BYTES = 4 << 10
# A time is 30 bytes, a total at most 20 digits.
SMALL_FILE_BYTES = 64
# Ingests read per scrape: a node has tens in flight; ListStatuses' MAX_ITEMS holds too.
MAX_INGESTS = 20_000


class IngestDirError(Exception):
    """The ingest directory could not be read; the message names the path and the fix."""


def _timestamp(text: str) -> float | None:
    """Seconds since the epoch from containerd's RFC 3339 time (Go's RFC3339Nano: the
    fraction has up to nine digits, or none), its nanoseconds kept."""
    text = text.strip()
    if not text:
        return None
    base, zone, fraction = text[:19], text[19:], ""
    if zone.startswith("."):
        digits = len(zone) - 1 - len(zone[1:].lstrip("0123456789"))
        fraction, zone = zone[1 : 1 + digits], zone[1 + digits :]
    when = datetime.fromisoformat(base + ("+00:00" if zone in ("Z", "z") else zone))
    if when.tzinfo is None:
        raise ValueError(f"time without a zone: {text!r}")
    return when.timestamp() + (int(fraction) / 10 ** len(fraction) if fraction else 0.0)


def _total(text: str) -> int:
    """The expected size: decimal digits, as containerd writes an int64 (int() alone
    would take a sign, underscores and other scripts' digits)."""
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError(f"total is not a byte count: {text[:SMALL_FILE_BYTES]!r}")
    return int(digits)


def _read(path: str, cap: int, name: str) -> str:
    return read_capped(path, cap, name).decode("utf-8", "replace")


def _small(where: str, name: str) -> str:
    return _read(os.path.join(where, name), SMALL_FILE_BYTES, "SMALL_FILE_BYTES")


class IngestDir:
    """The active ingests of one containerd namespace, read from the ingest directory."""

    def __init__(self, path: str, namespace: str):
        self.path = path
        self.prefix = namespace + "/"

    def _entries(self) -> list[str]:
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            raise IngestDirError(
                f"containerd ingest directory {self.path} does not exist "
                f"(--containerd.ingest-dir; mount containerd's "
                f"io.containerd.content.v1.content/ingest read-only there)"
            ) from None
        except NotADirectoryError:
            raise IngestDirError(
                f"{self.path} is not a directory (--containerd.ingest-dir)"
            ) from None
        except PermissionError:
            raise IngestDirError(
                f"containerd ingest directory {self.path}: permission denied for uid "
                f"{os.getuid()} (containerd makes it 0755: check the mount and its mode)"
            ) from None
        if len(names) > MAX_INGESTS:
            raise IngestDirError(
                f"{self.path}: more than {MAX_INGESTS} ingests (MAX_INGESTS in {HERE})"
            )
        return names

    def _one(self, name: str) -> Ingest | None:
        """The ingest in ingest/NAME, or None when it is another namespace's or went away
        (committed or aborted between the listing and the read)."""
        where = os.path.join(self.path, name)
        try:
            key = _read(os.path.join(where, "ref"), REF_BYTES, "REF_BYTES")
            if not key.startswith(self.prefix):
                return None
            _number, sep, ref = key[len(self.prefix) :].partition("/")
            if not sep:
                return None
            data = os.stat(os.path.join(where, "data"))
            if not stat.S_ISREG(data.st_mode):
                raise ValueError("data is not a regular file")
            started = _timestamp(_small(where, "startedat"))
            updated = _timestamp(_small(where, "updatedat"))
            try:
                total = _total(_small(where, "total"))
            except FileNotFoundError:
                total = 0
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            return None  # a stray file beside the ingests: not one of containerd's
        except PermissionError as exc:
            raise IngestDirError(
                f"{exc.filename}: permission denied for uid {os.getuid()} (containerd "
                f"writes these files 0644 under umask 022; a stricter umask of "
                f"containerd's makes them unreadable: use --image-pull.source=socket)"
            ) from None
        except FileRefused as exc:
            raise IngestDirError(str(exc)) from None
        except ValueError as exc:
            raise IngestDirError(f"{where}: not a containerd ingest: {exc}") from None
        mtime = data.st_mtime_ns / 1e9
        return Ingest(
            ref=ref,
            offset=data.st_size,
            total=total,
            started_at=started,
            updated_at=mtime if updated is None or mtime > updated else updated,
        )

    def ingests(self) -> list[Ingest]:
        """Every unfinished write of the namespace, as Content.ListStatuses lists them."""
        found = []
        for name in self._entries():
            try:
                ingest = self._one(name)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                    continue
                raise IngestDirError(f"{os.path.join(self.path, name)}: {exc.strerror}") from None
            if ingest is not None:
                found.append(ingest)
        return sorted(found, key=lambda i: i.ref)
