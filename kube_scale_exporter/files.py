"""Reads of local files with a byte cap, refusing anything but a regular file.

A path the exporter reads on every scrape (the kubelet's config, /proc/net/stat) can be
replaced by something hostile or broken: a FIFO blocks `open()` forever, a device or an
endless file never ends, a 200 MiB file held the GIL for 8.4 s in the YAML parser. The
checks run on the opened descriptor (fstat), not on a separate stat of the path, so a
file swapped between the two is still caught. Symlinks are followed: Kubernetes mounts
ConfigMaps and projected tokens through them.
"""

from __future__ import annotations

import errno
import os
import stat

# KubeletConfiguration files are 1-10 KB; PyYAML parses ~0.4 MB a second of CPU, holding
# the GIL, so 64 KiB costs at most ~0.15 s a change.
KUBELET_CONFIG_BYTES = 64 << 10
# /proc/net/stat/{arp,ndisc}_cache: a header and ~130 bytes per CPU (4,096 CPUs: ~530 KB).
PROC_STAT_BYTES = 1 << 20
# kubeconfig files: a few KB per cluster and user with embedded certificates; read once
# at start-up.
KUBECONFIG_BYTES = 1 << 20
# A service account token (a JWT) is 1-2 KB.
TOKEN_BYTES = 64 << 10
# containerd's config.toml and each drop-in it imports: a few KB; `containerd config
# default` writes ~12 KB. Read every scrape by imagepull (containerd/config.py).
CONTAINERD_CONFIG_BYTES = 256 << 10
# A registry's hosts.toml: a server line and a few [host] tables, under 1 KB (Spegel
# writes ~100 bytes a mirror target). Read every scrape for each registry directory listed
# (containerd/hostsdir.py).
HOSTS_TOML_BYTES = 64 << 10
# containerd's binary, read once per change for its Go build info (containerd/buildinfo.py):
# 40-55 MB for 1.7 to 2.4.
CONTAINERD_BINARY_BYTES = 256 << 20
# --web.config.file: TLS file paths and ~70 bytes per basic-auth user; parsed again on
# every change while serving.
WEB_CONFIG_BYTES = 1 << 20
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
    (stat.S_ISSOCK, "a socket"),
)


class FileRefused(OSError):
    """Not a regular file, or larger than its cap; the message names the cap."""

    def __init__(self, code: int, message: str):
        super().__init__(code, message)

    def __str__(self) -> str:
        return self.strerror


def read_capped(path: str, cap: int, cap_name: str) -> bytes:
    """The file's bytes; FileRefused for a non-regular file or one over `cap` bytes (the
    read stops there). Other OSErrors (missing, unreadable) pass through."""
    # O_NONBLOCK: opening a FIFO with no writer must not wait for one.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise FileRefused(errno.EINVAL, f"{path} is {kind}, not a regular file")
        chunks, total = [], 0
        while chunk := os.read(fd, min(1 << 16, cap + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:
                raise FileRefused(
                    errno.EFBIG,
                    f"{path} is over the {cap >> 10} KiB cap "
                    f"({cap_name} in kube_scale_exporter/files.py)",
                )
        return b"".join(chunks)
    finally:
        os.close(fd)
