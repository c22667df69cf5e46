"""containerd's version from its binary, without its socket: the Go build info.

Every Go binary since Go 1.18 carries its main package path and module versions in an
ELF section, `.go.buildinfo` (what `go version -m BINARY` prints). containerd 1.x's main
package is github.com/containerd/containerd/cmd/containerd, 2.x's is under
github.com/containerd/containerd/v2/, so the path alone says the major version; the
module's version (`v2.4.2`) is there when the binary was built from a released module, as
from the Go module proxy, and `(devel)` or absent when built from a source tree (Debian's
1.7.24 says nothing more than its path). So this gives (major, minor) or (major, None).

Bounded: only the ELF header, the section headers (at most MAX_SECTIONS) and the one
section are read (at most SECTION_BYTES), never the whole binary; a file that is not a
regular file, not a 64-bit little-endian ELF, or over CONTAINERD_BINARY_BYTES is refused
with BuildInfoError naming the path.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass

from kube_scale_exporter.files import CONTAINERD_BINARY_BYTES

MAGIC = b"\xff Go buildinf:"
MAX_SECTIONS = 256
SECTION_BYTES = 64 << 10
MAIN_V1 = "github.com/containerd/containerd/"
MAIN_V2 = "github.com/containerd/containerd/v2/"
MODULES = ("github.com/containerd/containerd", "github.com/containerd/containerd/v2")


class BuildInfoError(Exception):
    """The binary could not be read as a Go binary; the message names the path."""


@dataclass(frozen=True)
class BinaryVersion:
    major: int
    minor: int | None  # None: the binary names no release (built from a source tree)
    text: str  # the module version as built ("v2.4.2"), or "" when none


def _uvarint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while at < len(data) and shift < 64:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    raise ValueError("truncated varint")


def _read_at(fd: int, offset: int, size: int, file_size: int) -> bytes:
    """`size` bytes at `offset`, which the headers say and a hostile file can set to
    anything: ValueError unless they lie within the file."""
    if not 0 <= offset <= file_size - size or size < 0:
        raise ValueError(f"{size} bytes at {offset} past the end")
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise ValueError(f"{size} bytes at {offset} past the end")
    return data


def _section(fd: int, name: bytes, file_size: int) -> bytes:
    head = os.pread(fd, 64, 0)
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", head, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
    if shentsize != 64 or not 0 < shnum <= MAX_SECTIONS or shstrndx >= shnum:
        raise ValueError(f"{shnum} section headers of {shentsize} bytes")
    table = _read_at(fd, shoff, shnum * 64, file_size)
    headers = [struct.unpack_from("<IIQQQQ", table, i * 64) for i in range(shnum)]
    _, _, _, _, str_off, str_size = headers[shstrndx]
    names = _read_at(fd, str_off, min(str_size, SECTION_BYTES), file_size)
    for name_at, _type, _flags, _addr, offset, size in headers:
        end = names.find(b"\0", name_at)
        if names[name_at:end] == name:
            return _read_at(fd, offset, min(size, SECTION_BYTES), file_size)
    raise ValueError(f"no {name.decode()} section (not a Go binary, or built before Go 1.18)")


def _modinfo(section: bytes) -> str:
    at = section.find(MAGIC)
    if at < 0 or len(section) < at + 32:
        raise ValueError("no build info header")
    flags = section[at + 15]
    if not flags & 2:
        raise ValueError("build info not inline (built before Go 1.18)")
    at += 32
    length, at = _uvarint(section, at)  # the Go version
    at += length
    length, at = _uvarint(section, at)
    text = section[at : at + length]
    # Sentinels of 16 bytes around the text, as the Go linker writes them.
    if len(text) >= 33 and text[-17:-16] == b"\n":
        text = text[16:-16]
    return text.decode("utf-8", "replace")


def parse_modinfo(text: str) -> BinaryVersion:
    """(major, minor) from the build info text `go version -m` prints."""
    path, versions = "", {}
    for line in text.splitlines():
        fields = line.split("\t")
        if fields[0] == "path" and len(fields) > 1:
            path = fields[1]
        elif fields[0] in ("mod", "dep") and len(fields) > 2:
            versions[fields[1]] = fields[2]
    if path.startswith(MAIN_V2):
        major = 2
    elif path.startswith(MAIN_V1):
        major = 1
    else:
        raise ValueError(f"main package {path[:100]!r} is not containerd's")
    version = versions.get(MODULES[1] if major == 2 else MODULES[0], "")
    parts = version.removeprefix("v").split(".")
    if version.startswith("v") and len(parts) >= 2 and parts[0] == str(major):
        if parts[1].isascii() and parts[1].isdigit():
            return BinaryVersion(major, int(parts[1]), version)
    return BinaryVersion(major, None, "")


def read_version(path: str) -> BinaryVersion:
    """containerd's version from its binary at `path`; BuildInfoError says why not."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        raise BuildInfoError(f"{path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BuildInfoError(f"{path} is not a regular file")
        if st.st_size > CONTAINERD_BINARY_BYTES:
            raise BuildInfoError(
                f"{path} is over the {CONTAINERD_BINARY_BYTES >> 20} MiB cap "
                "(CONTAINERD_BINARY_BYTES in kube_scale_exporter/files.py)"
            )
        try:
            return parse_modinfo(_modinfo(_section(fd, b".go.buildinfo", st.st_size)))
        except (ValueError, struct.error) as exc:
            raise BuildInfoError(f"{path}: {exc}") from None
    except OSError as exc:
        raise BuildInfoError(f"{path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


class BinaryVersionCache:
    """read_version(path), read again only when the file's identity or mtime changes."""

    def __init__(self, path: str):
        self.path = path
        self._key: tuple | None = None
        self._value: BinaryVersion | BuildInfoError | None = None

    def get(self) -> BinaryVersion:
        try:
            st = os.stat(self.path)
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError as exc:
            raise BuildInfoError(f"{self.path}: {exc.strerror or exc}") from None
        if key != self._key:
            try:
                self._value = read_version(self.path)
            except BuildInfoError as exc:
                self._value = exc
            self._key = key
        if isinstance(self._value, BuildInfoError):
            raise self._value
        return self._value
