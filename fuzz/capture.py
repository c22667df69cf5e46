"""Record the fuzz seeds from real components: python -m fuzz.capture [NAME...] (as root).

Each capture starts what it reads from (a network namespace, etcd 3.4 and 3.5.30,
containerd 1.6 and 2.1, a Prometheus scraping a socket) on this machine, writes the bytes
it received to fuzz/corpus/NAME/, and stops it. Files already there are replaced; inputs
that once broke an invariant (crash-*) are kept.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

from fuzz import CORPUS

ETCD_SID = "/var/cache/kube-scale-exporter/etcd-sid/root/usr/bin/etcd"
CONTAINERD_SID = "/var/cache/kube-scale-exporter/containerd-sid/root/usr/bin"


def _write(name: str, files: dict[str, bytes]) -> None:
    folder = CORPUS / name
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        if not old.name.startswith("crash-"):
            old.unlink()
    for file_name, data in files.items():
        (folder / file_name).write_bytes(data)
    print(f"{name}: {len(files)} seeds, {sum(map(len, files.values()))} bytes")


# ---- netlink: this kernel's RTM_GETNEIGH and RTM_GETNEIGHTBL replies --------------------


def netlink() -> None:
    from kube_scale_exporter.netlink import neighbor  # noqa: PLC0415  (captures import what they read)
    from kube_scale_exporter.netlink.route import RouteSocket  # noqa: PLC0415
    from testbed.netns import NetNS, neighbor_adds  # noqa: PLC0415

    files = {}

    def dump(sock, msg_type, body, reader, name):
        chunks = []

        def keep(chunk):
            chunks.append(bytes(chunk))
            return reader(chunk)

        sock.dump(msg_type, body, keep)
        for i, chunk in enumerate(chunks):
            files[f"{name}-{i}"] = chunk

    with NetNS() as ns:
        ns.batch(
            neighbor_adds(6, "ipv4", "permanent")
            + neighbor_adds(6, "ipv4", "stale", start=6)
            + neighbor_adds(3, "ipv4", "reachable", start=12)
            + neighbor_adds(4, "ipv6", "stale")
            + neighbor_adds(2, "ipv6", "noarp", start=4)
        )
        ns.ip("neigh", "add", "192.0.2.6", "lladdr", "02:00:00:00:01:06", "dev", "v0", "nud", "stale", "extern_learn")
        ns.ip("neigh", "add", "192.0.2.7", "dev", "v0", "managed")
        sock = RouteSocket()

        def both():
            dump(sock, neighbor.RTM_GETNEIGH, neighbor._NDMSG.pack(0, 0, 0, 0, 0, 0, 0), neighbor.EntryCounter(), "neigh")
            dump(sock, neighbor.RTM_GETNEIGHTBL, neighbor._NDTMSG.pack(0, 0, 0), neighbor.TableReader(), "neightbl")
            sock.close()

        ns.run(both)
    _write("netlink", files)


# ---- containerd: gRPC replies (HTTP/2 bytes and their messages) and config dumps ----------


class _Relay:
    """A unix socket relaying each connection to containerd's, keeping what the server
    sent on each (the client's bytes pass unrecorded)."""

    def __init__(self, path: str, target: str):
        self.path, self.target, self.replies = path, target, []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        self._sock.listen(4)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.target)
            reply = bytearray()
            self.replies.append(reply)
            threading.Thread(target=self._pump, args=(conn, upstream, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, conn, reply), daemon=True).start()

    @staticmethod
    def _pump(src, dst, keep):
        try:
            while data := src.recv(65536):
                if keep is not None:
                    keep += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self._sock.close()


def containerd() -> None:
    from kube_scale_exporter.containerd import client as cd  # noqa: PLC0415
    from kube_scale_exporter.containerd import grpc_h2, pulls, wire  # noqa: PLC0415
    from fuzz.containerd_config import FILES, join  # noqa: PLC0415
    from testbed.containerd_server import ContainerdServer  # noqa: PLC0415
    from testbed.registry_server import RegistryServer  # noqa: PLC0415
    from testbed.throttle_proxy import ThrottleProxy  # noqa: PLC0415

    grpc, messages, configs = {}, {}, {}
    # containerd's own files, with a drop-in as a node image adds one (the harness writes
    # an input's files to FILES, so the import's absolute path holds in replay too).
    drop_in = b'[plugins."io.containerd.grpc.v1.cri"]\n  max_concurrent_downloads = 8\n'
    imports = [f"{FILES}/conf.d/*.toml"]
    calls = {
        "statuses": (cd.LIST_STATUSES, b""),
        "images": (cd.LIST_IMAGES, b""),
        "content": (cd.LIST_CONTENT, wire.encode_strings(1, [pulls.MANIFEST_FILTER])),
        "version": (cd.VERSION, b""),
        "unknown-method": ("/containerd.services.content.v1.Content/Nothing", b""),
    }
    work = tempfile.mkdtemp(prefix="fz-", dir="/tmp")
    registry = RegistryServer(f"{work}/registry").start()
    proxy = ThrottleProxy(work, registry.port, 256 << 10)
    try:
        registry.push_image("app", "v1", [64 << 10, 32 << 10])
        registry.push_image("big", "v1", [16 << 20])
        for label, bin_dir in (("1.6", None), ("2.1", CONTAINERD_SID)):
            server = ContainerdServer(f"{work}/cd{label}", bin_dir=bin_dir, imports=imports).start()
            fetch = None
            try:
                server.ctr("image", "pull", "--plain-http", f"{registry.host}/app:v1")
                fetch = server.fetch(f"{proxy.host}/big:v1", f"{work}/fetch{label}.log")
                server.layers_downloading(want=1, timeout=60)
                relay = _Relay(f"{work}/r{label}.sock", server.address)
                for name, (method, request) in calls.items():
                    try:
                        replies = grpc_h2.call(relay.path, method, request, 10, ((cd.NAMESPACE_HEADER, server.namespace),))
                    except grpc_h2.GrpcError as exc:
                        print(f"containerd {label} {name}: {exc}")
                        replies = []
                    time.sleep(0.2)  # the relay's last bytes
                    grpc[f"{name}-{label}"] = bytes(relay.replies[-1])
                    for i, reply in enumerate(replies):
                        messages[f"{name}-{label}-{i}"] = bytes(reply)
                relay.close()
                configs[f"dump-{label}"] = join([server.config_dump().encode()])
                configs[f"files-{label}"] = join([Path(server.config).read_bytes(), drop_in])
            finally:
                if fetch is not None:
                    fetch.stop()
                server.wipe()
    finally:
        proxy.stop()
        registry.proc.stop()
        subprocess.run(["rm", "-rf", work], check=False)
    _write("grpc", grpc)
    _write("protobuf", messages)
    _write("containerd_config", configs)


CAPTURES = {"netlink": netlink, "containerd": containerd}


def main(names: list[str]) -> int:
    for name in names or CAPTURES:
        CAPTURES[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
