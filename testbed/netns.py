"""Throwaway network namespaces for tests and benchmarks, deleted even on failure.

Neighbor entries need a real link: veth works on these machines, dummy does not (no
module). Code that must run inside the namespace runs in a thread joined to it with
setns(2), so sockets it opens belong to that namespace (Python 3.11 has no os.setns).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
import threading
import uuid

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=60)


class NetNS:
    """`ip netns add` on entry with a veth pair (v0, v1) up inside; deleted on exit."""

    def __init__(self, prefix: str = "kst"):
        self.name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.path = f"/run/netns/{self.name}"

    def __enter__(self) -> "NetNS":
        ip("netns", "add", self.name)
        try:
            # No link-local addresses: no DAD or router solicitation adds entries behind
            # the test's back.
            self.run(_write, "/proc/sys/net/ipv6/conf/default/addr_gen_mode", "1")
            self.ip("link", "set", "lo", "up")
            self.ip("link", "add", "v0", "type", "veth", "peer", "name", "v1")
            self.ip("link", "set", "v0", "up")
            self.ip("link", "set", "v1", "up")
        except BaseException:
            self.delete()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.delete()

    def delete(self) -> None:
        ip("netns", "delete", self.name, check=False)

    def ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return ip("-n", self.name, *args, check=check)

    def batch(self, commands: list[str], force: bool = False) -> subprocess.CompletedProcess:
        """Run many `ip` commands in one process (100k neighbor adds take ~1 s)."""
        with tempfile.NamedTemporaryFile("w", suffix=".ip") as f:
            f.write("\n".join(commands) + "\n")
            f.flush()
            args = ["-force"] if force else []
            return ip(*args, "-n", self.name, "-batch", f.name, check=not force)

    def run(self, fn, *args):
        """Call fn(*args) in a thread inside this namespace; return or raise its result."""
        result: dict = {}

        def target():
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({self.path}): {os.strerror(err)}")
            finally:
                os.close(fd)
            try:
                result["value"] = fn(*args)
            except BaseException as exc:  # noqa: BLE001  (re-raised in the caller)
                result["error"] = exc

        # The thread ends after fn, so no other work ever runs in the namespace by mistake.
        thread = threading.Thread(target=target, name=f"netns-{self.name}")
        thread.start()
        thread.join()
        if "error" in result:
            raise result["error"]
        return result["value"]


def _write(path: str, value: str) -> None:
    # /proc/sys/net is the namespace of the thread that opens it.
    with open(path, "w") as f:
        f.write(value)


def neighbor_adds(
    count: int, family: str, nud: str, device: str = "v0", start: int = 0
) -> list[str]:
    """`neigh add` commands for `count` distinct addresses of one family."""
    lines = []
    for i in range(start, start + count):
        if family == "ipv4":
            addr = f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
        else:
            addr = f"fd00::{(i >> 16) & 0xFFFF:x}:{i & 0xFFFF:x}"
        mac = (
            f"02:00:{(i >> 24) & 255:02x}:{(i >> 16) & 255:02x}:{(i >> 8) & 255:02x}:{i & 255:02x}"
        )
        lines.append(f"neigh add {addr} lladdr {mac} dev {device} nud {nud}")
    return lines
