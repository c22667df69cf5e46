"""Record the fuzz seeds from real components: python -m fuzz.capture [NAME...] (as root).

Each capture starts what it reads from (a network namespace, etcd 3.5.30, 3.6 and 3.7,
containerd 1.7, 2.3 and 2.4, a Prometheus scraping a socket) on this machine, writes the bytes
it received to fuzz/corpus/NAME/, and stops it. Files already there are replaced; inputs
that once broke an invariant (crash-*) and those `python -m fuzz keep` added (found-*)
are kept.
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


def _write(name: str, files: dict[str, bytes]) -> None:
    folder = CORPUS / name
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        if not old.name.startswith(("crash-", "found-")):
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
        ns.ip(
            "neigh",
            "add",
            "192.0.2.6",
            "lladdr",
            "02:00:00:00:01:06",
            "dev",
            "v0",
            "nud",
            "stale",
            "extern_learn",
        )
        ns.ip("neigh", "add", "192.0.2.7", "dev", "v0", "managed")
        sock = RouteSocket()

        def both():
            dump(
                sock,
                neighbor.RTM_GETNEIGH,
                neighbor._NDMSG.pack(0, 0, 0, 0, 0, 0, 0),
                neighbor.EntryCounter(),
                "neigh",
            )
            dump(
                sock,
                neighbor.RTM_GETNEIGHTBL,
                neighbor._NDTMSG.pack(0, 0, 0),
                neighbor.TableReader(),
                "neightbl",
            )
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
    from testbed.containerd_server import ContainerdServer, bin_dir  # noqa: PLC0415
    from testbed.registry_server import RegistryServer  # noqa: PLC0415
    from testbed.throttle_proxy import ThrottleProxy  # noqa: PLC0415

    grpc, messages, configs = {}, {}, {}
    # containerd's own files, with a drop-in as a node image adds one (the harness writes
    # an input's files to FILES, so the import's absolute path holds in replay too).
    drop_in = (
        b'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  max_concurrent_downloads = 8\n'
    )
    imports = [f"{FILES}/conf.d/*.toml"]
    subprocess.run(["rm", "-rf", FILES], check=False)  # what a harness left there
    os.makedirs(f"{FILES}/conf.d")
    Path(f"{FILES}/conf.d/01.toml").write_bytes(drop_in)
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
        for label in ("1.7", "2.3", "2.4"):
            server = ContainerdServer(
                f"{work}/cd{label}", bin_dir=bin_dir(label), imports=imports
            ).start()
            fetch = None
            try:
                server.ctr("image", "pull", "--plain-http", f"{registry.host}/app:v1")
                fetch = server.fetch(f"{proxy.host}/big:v1", f"{work}/fetch{label}.log")
                server.layers_downloading(want=1, timeout=60)
                relay = _Relay(f"{work}/r{label}.sock", server.address)
                for name, (method, request) in calls.items():
                    try:
                        replies = grpc_h2.call(
                            relay.path,
                            method,
                            request,
                            10,
                            ((cd.NAMESPACE_HEADER, server.namespace),),
                        )
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
        subprocess.run(["rm", "-rf", work, FILES], check=False)
    _write("grpc", grpc)
    _write("protobuf", messages)
    _write("containerd_config", configs)


# ---- containerd's ingest directory: containerd 1.7, 2.3 and 2.4 mid-pull, and a pull left stalled


def ingest() -> None:
    from fuzz.ingest_dir import FILES, encode  # noqa: PLC0415
    from testbed.containerd_server import ContainerdServer, bin_dir  # noqa: PLC0415
    from testbed.procs import Proc  # noqa: PLC0415
    from testbed.registry_server import RegistryServer  # noqa: PLC0415
    from testbed.throttle_proxy import ThrottleProxy  # noqa: PLC0415

    def snapshot(server) -> bytes:
        """The ingest directory now: each file's bytes, data as its size and mtime."""
        root = f"{server.workdir}/root/io.containerd.content.v1.content/ingest"
        entries = []
        for name in sorted(os.listdir(root)):
            entry = {"name": name.encode()}
            for file_name in FILES:
                path = os.path.join(root, name, file_name)
                try:
                    if file_name == "data":
                        st = os.stat(path)
                        entry["data"] = f"{st.st_size}@{st.st_mtime_ns}".encode()
                    else:
                        entry[file_name] = Path(path).read_bytes()
                except FileNotFoundError:
                    pass
            entries.append(entry)
        return encode(entries)

    def _written(root: str, timeout: float = 20.0) -> None:
        """Until every ingest's data holds some bytes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            names = os.listdir(root)
            if names and all(os.path.getsize(f"{root}/{n}/data") for n in names):
                return
            time.sleep(0.2)
        raise TimeoutError(f"{root}: not every ingest written to within {timeout}s")

    files = {}
    work = tempfile.mkdtemp(prefix="fz-", dir="/tmp")
    registry = RegistryServer(f"{work}/registry").start()
    proxy = ThrottleProxy(work, registry.port, 256 << 10)
    try:
        registry.push_image("big", "v1", [8 << 20, 4 << 20, 2 << 20])
        for label in ("1.7", "2.3", "2.4"):
            clients = {"fetch": ("content", "fetch"), "pull": ("images", "pull")}
            for client, verb in clients.items():
                server = ContainerdServer(f"{work}/cd{label}{client}", bin_dir=bin_dir(label))
                server.start()
                pull = None
                try:
                    pull = Proc(
                        server.ctr_argv(*verb, "--plain-http", f"{proxy.host}/big:v1"),
                        f"{work}/{label}{client}.log",
                    )
                    server.layers_downloading(want=3, timeout=60)
                    _written(f"{server.workdir}/root/io.containerd.content.v1.content/ingest")
                    files[f"{client}-{label}"] = snapshot(server)
                    pull.stop()  # the client gone mid-pull: its ingests stay, stalled
                    pull = None
                    time.sleep(1.0)
                    files[f"{client}-{label}-stalled"] = snapshot(server)
                finally:
                    if pull is not None:
                        pull.stop()
                    server.wipe()
    finally:
        proxy.stop()
        registry.proc.stop()
        subprocess.run(["rm", "-rf", work], check=False)
    _write("ingest_dir", files)


# ---- etcd: JSON gateway answers and /metrics pages of 3.5.30, 3.6 and 3.7 ---------------


def etcd() -> None:
    from kube_scale_exporter.etcd import page  # noqa: PLC0415
    from kube_scale_exporter.etcd.answers import encode_key  # noqa: PLC0415
    from testbed.etcd_server import EtcdServer, put_many  # noqa: PLC0415

    answers, pages = {}, {}
    pods = {
        "key": encode_key(b"/registry/pods/"),
        "range_end": encode_key(b"/registry/pods0"),
        "serializable": True,
    }
    asks = {
        "status": ("/v3/maintenance/status", {}),
        "members": ("/v3/cluster/member/list", {}),
        "alarms": ("/v3/maintenance/alarm", {"action": "GET"}),
        "count": ("/v3/kv/range", dict(pods, count_only=True)),
        "first-key": ("/v3/kv/range", dict(pods, keys_only=True, limit=1)),
        "bad-request": ("/v3/kv/range", {"key": "not base64!"}),
    }
    work = tempfile.mkdtemp(prefix="fz-", dir="/tmp")
    try:
        for version in ("3.5.30", "3.6", "3.7"):
            server = EtcdServer(f"{work}/{version}", version=version, quota_bytes=16 << 20).start()
            try:
                session = server.session()
                put_many(
                    session,
                    server.client_url,
                    [(f"/registry/pods/ns/p{i}".encode(), b"x" * 100) for i in range(20)],
                )
                big = "A" * (512 << 10)
                for _ in range(60):  # over the quota: etcd raises its NOSPACE alarm
                    reply = session.post(
                        f"{server.client_url}/v3/kv/put",
                        json={"key": encode_key(b"big"), "value": big},
                        timeout=10,
                    )
                    if "space exceeded" in reply.text:
                        break
                for name, (path, body) in asks.items():
                    answers[f"{name}-{version}"] = session.post(
                        server.client_url + path, json=body, timeout=10
                    ).content
                text = session.get(server.client_url + "/metrics", timeout=10).content
                pages[f"metrics-{version}"] = _kept_lines(text, page.WANTED_WITHOUT_STATUS)
            finally:
                server.wipe()
    finally:
        subprocess.run(["rm", "-rf", work], check=False)
    _write("etcd_json", answers)
    _write("etcd_metrics", pages)


def _kept_lines(text: bytes, wanted: tuple[bytes, ...]) -> bytes:
    from kube_scale_exporter.etcd import page  # noqa: PLC0415

    """The page's lines of the families the parser reads, with their HELP and TYPE lines,
    and the first 40 others: the real page is ~150 KB, mostly families never read."""
    names = {w.split(b"{")[0].split(b" ")[0] for w in wanted}
    kept, others = [], 0
    for line in text.split(b"\n"):
        family = (
            line.split(b" ")[2]
            if line.startswith(b"# ") and line.count(b" ") >= 2
            else line.split(b"{")[0].split(b" ")[0]
        )
        if (
            family == page.HANDLED.encode()
            and b"etcdserverpb.KV" not in line
            and b"etcdserverpb.Lease" not in line
        ):
            continue  # ~700 lines, one per method and code: those the parser sums are kept
        if any(family.startswith(n.removesuffix(b"_bucket")) for n in names):
            kept.append(line)
        elif others < 40:
            kept.append(line)
            others += 1
    return b"\n".join(kept)


# ---- HTTP requests: what Prometheus 3.13 and 3.16, curl and requests send a /metrics port --


def http_request() -> None:
    from testbed import prometheus  # noqa: PLC0415
    from testbed.prometheus import PrometheusServer  # noqa: PLC0415

    files = {}
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.settimeout(30)

    def one_request() -> bytes:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\nx 1\n"
            )
            return data

    work = Path(tempfile.mkdtemp(prefix="fz-", dir="/tmp"))
    try:
        for release in prometheus.RELEASES:
            label, binary = f"prometheus-{release}", prometheus.binary(release, "prometheus")
            config = {
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                "scrape_configs": [
                    {"job_name": "x", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]},
                    {
                        "job_name": "auth",
                        "basic_auth": {"username": "prometheus", "password": "secret"},
                        "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
                    },
                ],
            }
            (work / label).mkdir()
            with PrometheusServer(work / label, config, binary=binary):
                for i in range(2):  # one scrape of each job
                    files[f"{label}-{i}"] = one_request()
        curl = subprocess.Popen(
            [
                "curl",
                "-s",
                "--compressed",
                "-H",
                "Connection: close",
                f"http://127.0.0.1:{port}/metrics",
            ],
            stdout=subprocess.DEVNULL,
        )
        files["curl"] = one_request()
        curl.wait(10)
        thread = threading.Thread(
            target=lambda: requests.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
        )
        thread.start()
        files["requests"] = one_request()
        thread.join()
    finally:
        listener.close()
        subprocess.run(["rm", "-rf", str(work)], check=False)
    _write("http_request", files)


# ---- files: the kubelet config the e2e kubelet runs with, a web config ------------------


def files() -> None:
    import bcrypt  # noqa: PLC0415
    import yaml  # noqa: PLC0415

    from testbed.node import kubelet_config  # noqa: PLC0415

    config = kubelet_config("/etc/kubernetes/pki/ca.crt")
    _write(
        "kubelet_config",
        {
            "e2e": yaml.safe_dump(config).encode(),
            "parallel": yaml.safe_dump(
                dict(config, serializeImagePulls=False, maxParallelImagePulls=5)
            ).encode(),
        },
    )
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()
    _write(
        "web_config",
        {
            "tls-auth": (
                "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
                "  client_allowed_sans: [prometheus.monitoring.svc]\n  min_version: TLS12\n"
                "  max_version: TLS13\n  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n"
                "  prefer_server_cipher_suites: true\nhttp_server_config:\n  http2: false\n"
                "  headers:\n    Strict-Transport-Security: max-age=31536000\n"
                f"basic_auth_users:\n  prometheus: {hashed}\n"
            ).encode(),
            "users": f"basic_auth_users:\n  prometheus: '{hashed}'\n  other: '{hashed}'\n".encode(),
        },
    )


# ---- Kubernetes: list pages and watch streams of a real API server; Events as it writes them


def kube() -> None:
    from testbed.kube_apiserver import KubeApiServer, etcd_compact, pod_manifest  # noqa: PLC0415
    from testbed.etcd_server import EtcdServer  # noqa: PLC0415
    from tests.imagepull_events.test_failures import REAL  # noqa: PLC0415  (real kubelets' texts)

    class Apiserver(KubeApiServer):
        def argv(self):
            # Kubernetes 1.24 removed --insecure-port (the secure port alone is served).
            argv = super().argv()
            at = argv.index("--insecure-port") if "--insecure-port" in argv else None
            return argv if at is None else argv[:at] + argv[at + 2 :]

    pages, watches, events = {}, {}, {}
    work = tempfile.mkdtemp(prefix="fz-", dir="/tmp")
    etcd = EtcdServer(f"{work}/etcd").start()
    api = Apiserver(f"{work}/apiserver", etcd.client_url)
    try:
        api.start()
        admin = api.admin

        def raw(path, **params):
            reply = admin.session.get(
                api.server + path,
                params=params,
                headers={"Authorization": f"Bearer {admin.token}"},
                verify=admin.ca,
                timeout=30,
            )
            return reply.content

        admin.create("/api/v1/namespaces", {"metadata": {"name": "fz"}})
        annotations = {
            "note": 'é 😀 " \\ \u2028 {[ ]} \\"',
            "quoted": 'say "{" or "[["',
            "long": "x" * 4000,
        }
        for i in range(6):
            pod = pod_manifest(
                f"p{i}",
                node="n1" if i % 2 else "n2",
                labels={"app": "a", "i": str(i)},
                requests={"cpu": "100m", "memory": "64Mi"},
            )
            if i < 2:
                pod["metadata"]["annotations"] = annotations
            admin.create("/api/v1/namespaces/fz/pods", pod)
        admin.create(
            "/api/v1/nodes",
            {"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}}},
        )
        pages["pods-page-1"] = raw("/api/v1/namespaces/fz/pods", limit="4")
        first = json.loads(pages["pods-page-1"])
        pages["pods-page-2"] = raw(
            "/api/v1/namespaces/fz/pods", limit="4", **{"continue": first["metadata"]["continue"]}
        )
        pages["pods-node-cache"] = raw(
            "/api/v1/pods", resourceVersion="0", fieldSelector="spec.nodeName=n1"
        )
        pages["pods-empty"] = raw("/api/v1/namespaces/default/pods", limit="500")
        pages["nodes"] = raw("/api/v1/nodes", limit="500")
        pages["priorityclasses"] = raw("/apis/scheduling.k8s.io/v1/priorityclasses", limit="500")
        pages["not-found"] = raw("/api/v1/namespaces/fz/pods/nothing")
        pulled = [
            'Successfully pulled image "nginx:1.25" in 2.035s (2.035s including waiting)',
            'Successfully pulled image "big:v3" in 29m12.5s (41m0s including waiting). '
            "Image size: 17179869184 bytes.",
        ]
        said = [("Failed", "Warning", m) for m, _, _ in REAL[:6]]
        for i, (reason, kind, message) in enumerate(
            said + [("Pulled", "Normal", m) for m in pulled]
        ):
            when = "2030-01-01T00:00:00Z"
            event = {
                "metadata": {"name": f"{reason.lower()}-{i}", "namespace": "fz"},
                "involvedObject": {"kind": "Pod", "namespace": "fz", "name": f"p{i % 6}"},
                "reason": reason,
                "message": message,
                "type": kind,
                "count": 1 + i % 3,
                "source": {"component": "kubelet", "host": f"n{1 + i % 2}"},
                "firstTimestamp": when,
                "lastTimestamp": when,
            }
            admin.create("/api/v1/namespaces/fz/events", event)
        listed = raw("/api/v1/namespaces/fz/events", limit="500")
        pages["events"] = listed
        for item in json.loads(listed)["items"]:
            events[item["metadata"]["name"]] = json.dumps(item, separators=(",", ":")).encode()
        rv = first["metadata"]["resourceVersion"]

        def writes():
            time.sleep(0.5)
            admin.merge_patch(
                "/api/v1/namespaces/fz/pods/p0", {"metadata": {"labels": {"changed": "yes"}}}
            )
            admin.merge_patch(
                "/api/v1/namespaces/fz/pods/p1/status", {"status": {"phase": "Running"}}
            )
            admin.delete("/api/v1/namespaces/fz/pods/p2")
            admin.create("/api/v1/namespaces/fz/pods", pod_manifest("p9", node="n1"))

        def watch(path, since, seconds, **selectors):
            return raw(path, watch="1", resourceVersion=since, timeoutSeconds=seconds, **selectors)

        thread = threading.Thread(target=writes)
        thread.start()
        watches["pods"] = watch("/api/v1/namespaces/fz/pods", rv, "4", allowWatchBookmarks="true")
        thread.join()
        watches["pods-node"] = watch(
            "/api/v1/pods", rv, "2", fieldSelector="spec.nodeName=n1", allowWatchBookmarks="true"
        )
        etcd_compact(etcd.client_url)
        watches["too-old"] = watch("/api/v1/namespaces/fz/pods", "2", "2")
    finally:
        api.stop()
        etcd.stop()
        subprocess.run(["rm", "-rf", work], check=False)
    _write("kube_list", pages)
    _write("kube_watch", watches)
    _write("pull_events", events)


CAPTURES = {
    "kube": kube,
    "netlink": netlink,
    "containerd": containerd,
    "ingest": ingest,
    "etcd": etcd,
    "http_request": http_request,
    "files": files,
}


def main(names: list[str]) -> int:
    for name in names or CAPTURES:
        CAPTURES[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
