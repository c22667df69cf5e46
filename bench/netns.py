"""A throwaway network namespace holding many permanent neighbor entries.

The kernel's neighbor tables are host-global, so these entries show in every namespace's
counts; PERMANENT entries never count against gc_thresh3, so filling the table this way
cannot make the host's own resolutions fail. The namespace is deleted on exit.
"""
from __future__ import annotations

import ipaddress
import os
import subprocess
import tempfile


class NeighborNamespace:
    def __init__(self, count: int, name: str | None = None):
        self.count = count
        self.name = name or f"kse-bench-{os.getpid()}"

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", "-n", self.name, *args], check=True, capture_output=True)

    def __enter__(self) -> "NeighborNamespace":
        subprocess.run(["ip", "netns", "add", self.name], check=True, capture_output=True)
        try:
            self._ip("link", "add", "veth0", "type", "veth", "peer", "name", "veth1")
            self._ip("link", "set", "veth0", "up")
            self._ip("link", "set", "veth1", "up")
            self._ip("addr", "add", "100.64.0.1/10", "dev", "veth0")
            base = int(ipaddress.IPv4Address("100.64.1.0"))
            with tempfile.NamedTemporaryFile("w", suffix=".batch", delete=False) as batch:
                for i in range(self.count):
                    mac = f"02:00:{(i >> 24) & 255:02x}:{(i >> 16) & 255:02x}:{(i >> 8) & 255:02x}:{i & 255:02x}"
                    batch.write(f"neigh add {ipaddress.IPv4Address(base + i)} lladdr {mac} "
                                f"dev veth0 nud permanent\n")
            try:
                self._ip("-batch", batch.name)
            finally:
                os.unlink(batch.name)
        except BaseException:
            self.delete()
            raise
        return self

    def delete(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)

    def __exit__(self, *exc) -> None:
        self.delete()
