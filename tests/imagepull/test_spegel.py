"""Spegel's own metrics against where real pulls went: what `spegel_mirror_requests_total`
can tell about a node's mirror, and what it cannot.

Three nodes in a network namespace of the test's own (Spegel's router leaves loopback
addresses out of what it advertises, so each node has an address of its own there):
containerd 2.4.2 with its CRI, the hosts.toml written by the real `spegel configuration`
and Spegel 0.7.4's `registry` beside it (peers found through its HTTP bootstrapper, the
first node's), one upstream docker-registry for all. Nodes a and b read the mirror
(config_path one directory); node c leaves config_path unset, so containerd 2.4's
transfer service ignores it (docs/imagepull.md). Pulls go through `crictl pull`; where
each went is read from the upstream's access log, what Spegel saw from its request log
and its /metrics.

docs/imagepull.md holds the measured table (KSE_UPDATE_DOCS=1 writes it); the case fails
when a row there differs from what it measured, so a Spegel or containerd upgrade that
changes what the counter counts is noticed.
"""

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from kube_scale_exporter.containerd import config, hostsdir
from kube_scale_exporter.containerd.buildinfo import read_version
from testbed import builds
from testbed.containerd_server import ContainerdServer, bin_dir
from testbed.doctable import DocTable
from testbed.netns import NetNS
from testbed.pki import TestCA
from testbed.procs import Proc, wait_for_port
from testbed.registry_server import RegistryServer

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "imagepull.md"
TABLE = DocTable(DOC, "spegel-counter", lambda row: row.split("|")[1].strip())
LINE = "2.4"
# Addresses of the documentation range, inside the namespace only.
ADDRESSES = {"a": "192.0.2.1", "b": "192.0.2.2", "c": "192.0.2.3"}
# Spegel's default ports, on each node's address.
REGISTRY_PORT, ROUTER_PORT, BOOTSTRAP_PORT, METRICS_PORT = 5000, 5001, 5002, 9090
# The upstream on port 80 (and 443, for node c): containerd's distribution-source label
# drops a port, and Spegel then filters out the blobs of a registry its flags name with
# one (seen here: peers served the tag, every blob missed).
UPSTREAM = "127.0.0.1"
ONE_DIR = f'[plugins."io.containerd.cri.v1.images".registry]\n  config_path = "{hostsdir.DEFAULT_ROOTS[0]}"\n'
# c: 2.4's default config_path, the colon list the transfer service ignores.
CONFIG_PATH = {"a": ONE_DIR, "b": ONE_DIR, "c": ""}
COUNTER = "spegel_mirror_requests_total"
# The doc table's rows, one per pull of the story below.
ROWS = (
    "an image no peer holds (node b)",
    "the same image on another node (node a)",
    "that image again on node a, present there",
    "a fresh image on node c, whose containerd ignores the mirror",
)
LAYERS = [4096, 8192]


class Node:
    """containerd with its CRI and Spegel's registry beside it, at `address`."""

    def __init__(self, name, work, ns, prefix, upstream_url):
        self.name, self.address, self.ns = name, ADDRESSES[name], ns
        self.work = f"{work}/{name}"
        etc = f"{self.work}/etc"
        os.makedirs(f"{etc}/docker/certs.d", exist_ok=True)
        written = subprocess.run(
            [
                builds.spegel_binary(),
                "configuration",
                "--containerd-registry-config-path",
                f"{etc}/containerd/certs.d",
                "--mirrored-registries",
                upstream_url,
                "--mirror-targets",
                f"http://{self.address}:{REGISTRY_PORT}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert written.returncode == 0, written.stderr
        self.containerd = ContainerdServer(
            f"{self.work}/cd",
            bin_dir=bin_dir(LINE),
            cri=True,
            extra=CONFIG_PATH[name],
            etc_dir=etc,
            prefix=prefix,
        ).start()
        self.spegel_log = f"{self.work}/spegel.log"
        self.spegel = Proc(
            [
                *prefix,
                builds.spegel_binary(),
                # Its request log is at V(1): what the node's containerd asked, each line.
                "--log-level",
                "DEBUG",
                "registry",
                "--bootstrap-kind",
                "http",
                "--http-bootstrap-addr",
                f"{self.address}:{BOOTSTRAP_PORT}",
                "--http-bootstrap-peer",
                f"http://{ADDRESSES['a']}:{BOOTSTRAP_PORT}",
                "--metrics-addr",
                f"{self.address}:{METRICS_PORT}",
                "--containerd-sock",
                self.containerd.address,
                "--containerd-content-path",
                f"{self.containerd.workdir}/root/io.containerd.content.v1.content",
                "--data-dir",
                f"{self.work}/spegel",
                "--router-addr",
                f"{self.address}:{ROUTER_PORT}",
                "--registry-addr",
                f"{self.address}:{REGISTRY_PORT}",
                "--mirrored-registries",
                upstream_url,
                # The default, 20ms, is a latency budget for a peer lookup; on a loaded
                # test machine a lookup can take longer and a hit would read as a miss.
                "--mirror-resolve-timeout",
                "2s",
            ],
            self.spegel_log,
        )

    def wait_ready(self, timeout=60.0):
        wait_for_port(REGISTRY_PORT, proc=self.spegel)
        wait_for_port(METRICS_PORT, proc=self.spegel)
        deadline = time.monotonic() + timeout
        while self.get(f"http://{self.address}:{REGISTRY_PORT}/readyz").status_code != 200:
            assert time.monotonic() < deadline, f"Spegel on {self.name} not ready"
            assert self.spegel.alive(), self.spegel.log_tail()
            time.sleep(0.2)

    def get(self, url):
        return self.ns.run(lambda: requests.get(url, timeout=10))

    def metrics(self) -> dict:
        """{(sample name, sorted labels): value} of Spegel's /metrics, spegel_* and its
        HTTP request counts."""
        text = self.get(f"http://{self.address}:{METRICS_PORT}/metrics").text
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name.startswith("spegel_") or s.name == "http_request_duration_seconds_count":
                    out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def requests_logged(self, repo: str) -> list[dict]:
        """Spegel's request log lines for `repo` (what reached its registry port)."""
        lines = []
        with open(self.spegel_log, errors="replace") as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if f"/v2/{repo}/" in entry.get("path", ""):
                    lines.append(entry)
        return lines

    def pull(self, image: str) -> None:
        pulled = self.containerd.crictl_pull(image)
        assert pulled.returncode == 0, pulled.stderr + self.containerd.proc.log_tail()

    def verdict(self):
        """The exporter's verdict on this node's mirror, read from the same files."""
        version = read_version(self.containerd.containerd)
        settings = config.settings(self.containerd.config, (version.major, version.minor))
        dirs = hostsdir.read_host_dirs(
            settings.config_path, settings.config_path_set_by, settings.pull_path, prefix=self.work
        )
        [found] = [d for d in dirs.dirs if d.registry == UPSTREAM]
        assert found.writer == "spegel"
        return found

    def stop(self):
        self.spegel.stop()
        self.containerd.stop()


@pytest.fixture(scope="module")
def cluster():
    print(
        builds.version_line(os.path.join(bin_dir(LINE), "containerd")),
        "|",
        builds.version_line(builds.crictl_binary()),
        "| spegel",
        builds.third_party_version("spegel"),
    )
    work = tempfile.mkdtemp(prefix="sg-", dir="/tmp")
    started = []
    with NetNS("kse-spegel") as ns:
        try:
            for name, device in (("a", "v0"), ("b", "v1"), ("c", "v0")):
                ns.ip("addr", "add", f"{ADDRESSES[name]}/24", "dev", device)
            prefix = ["nsenter", f"--net={ns.path}"]
            upstream = RegistryServer(f"{work}/upstream", port=80, prefix=prefix).start()
            started.append(upstream)
            # Without a hosts.toml containerd goes to https://127.0.0.1 (port 443; no
            # verification for a local host): node c reaches the same storage there.
            cert, key = TestCA(f"{work}/tls", "upstream-ca").issue(
                "upstream", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"
            )
            os.makedirs(f"{work}/upstream-tls")
            os.symlink(f"{work}/upstream/storage", f"{work}/upstream-tls/storage")
            https = RegistryServer(
                f"{work}/upstream-tls", port=443, prefix=prefix, tls=(cert, key)
            ).start()
            started.append(https)
            nodes = {}
            for name in ADDRESSES:
                nodes[name] = Node(name, work, ns, prefix, f"http://{UPSTREAM}")
                started.append(nodes[name])
            for node in nodes.values():
                node.wait_ready()
            yield ns, (upstream, https), nodes
        finally:
            for thing in reversed(started):
                thing.stop()
            shutil.rmtree(work, ignore_errors=True)


def counted(before: dict, after: dict) -> dict:
    """What `spegel_mirror_requests_total` rose by between two scrapes: {cache: n}."""
    out = {}
    for (name, labels), value in after.items():
        if name == COUNTER:
            rise = value - before.get((name, labels), 0)
            if rise:
                out[dict(labels)["cache"]] = int(rise)
    return out


def http_requests(before: dict, after: dict) -> int:
    """Requests Spegel's registry answered between two scrapes (its `/v2/*` handler)."""
    return int(
        sum(
            v - before.get(k, 0)
            for k, v in after.items()
            if k[0] == "http_request_duration_seconds_count" and ("handler", "/v2/*") in k[1]
        )
    )


def wait_advertised(node: Node, digests: int, timeout=30.0):
    """Until node's Spegel advertises `digests` content digests of the upstream's."""
    key = ("spegel_advertised_content_digests", (("registry", UPSTREAM),))
    deadline = time.monotonic() + timeout
    while node.metrics().get(key, 0) < digests:
        assert time.monotonic() < deadline, f"{node.name} advertises {node.metrics().get(key)}"
        time.sleep(0.2)


def upstream_requests(doors, repo: str) -> int:
    """Requests containerd sent the upstream for `repo`, through either door."""
    return sum(len(door.requests_from("containerd/", repo)) for door in doors)


def measure(doors, node: Node, peers, repo: str) -> dict:
    """Pull REPO:v1 on NODE; what the upstream, NODE's Spegel and its peers' saw."""
    before = {n.name: n.metrics() for n in [node, *peers]}
    at_upstream = upstream_requests(doors, repo)
    logged = len(node.requests_logged(repo))
    node.pull(f"{UPSTREAM}/{repo}:v1")
    after = {n.name: n.metrics() for n in [node, *peers]}
    new_lines = node.requests_logged(repo)[logged:]
    return {
        "upstream": upstream_requests(doors, repo) - at_upstream,
        "counted": counted(before[node.name], after[node.name]),
        "http": http_requests(before[node.name], after[node.name]),
        "handlers": Counter((e.get("handler"), e.get("status")) for e in new_lines),
        "peers_counted": {p.name: counted(before[p.name], after[p.name]) for p in peers},
    }


def check_row(key: str, row: str) -> None:
    if os.environ.get("KSE_UPDATE_DOCS"):
        TABLE.put(row)
    assert TABLE.rows().get(key) == row, "run with KSE_UPDATE_DOCS=1 and commit docs/imagepull.md"


def row(key: str, m: dict, verdict) -> str:
    counts = ", ".join(f"{k} +{v}" for k, v in sorted(m["counted"].items())) or "+0"
    return (
        f"| {key} | {verdict.verdict} ({verdict.reason}) | {m['http']} | {counts} "
        f"| {m['upstream']} |"
    )


@pytest.mark.integration
def test_the_counter_on_a_miss_a_hit_a_repull_and_an_ignored_mirror(cluster):
    ns, doors, nodes = cluster
    upstream = doors[0]
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    requests_per_pull = 3 + len(LAYERS)  # the tag's HEAD, the manifest, config, layers

    # 1. No peer holds the image: every request containerd sends Spegel is a miss, and
    # the same requests then go to the upstream.
    ns.run(upstream.push_image, "sg/first", "v1", LAYERS)
    miss = measure(doors, b, [a], "sg/first")
    assert miss["counted"] == {"miss": requests_per_pull}, miss
    assert miss["upstream"] == requests_per_pull, miss
    assert miss["http"] == requests_per_pull, miss
    # The labels are exactly these two, `registry` the host containerd names in `ns`.
    labels = {k[1] for k in b.metrics() if k[0] == COUNTER}
    assert labels == {(("cache", "miss"), ("registry", UPSTREAM))}, labels

    # 2. A peer holds it: every request a hit, nothing reaches the upstream, and the peer
    # that served the bytes counts nothing (its requests carry X-Spegel-Mirrored).
    wait_advertised(b, 1 + 1 + len(LAYERS))
    hit = measure(doors, a, [b], "sg/first")
    assert hit["counted"] == {"hit": requests_per_pull}, hit
    assert hit["upstream"] == 0, hit
    assert hit["peers_counted"] == {"b": {}}, hit
    assert hit["handlers"] == {("mirror", 200): requests_per_pull}, hit

    # 3. The image is already on the node (imagePullPolicy Always, a re-verification
    # pull): containerd resolves the tag at its mirror, Spegel answers from the node's
    # own store, and the counter does not move.
    again = measure(doors, a, [b], "sg/first")
    assert again["counted"] == {}, again
    assert again["upstream"] == 0, again
    assert again["http"] == 1, again
    assert again["handlers"] == {("manifest", 200): 1}, again

    # 4. containerd ignores the mirror: Spegel sees nothing, the upstream everything.
    ns.run(upstream.push_image, "sg/ignored", "v1", LAYERS)
    ignored = measure(doors, c, [a, b], "sg/ignored")
    assert ignored["counted"] == {} and ignored["http"] == 0, ignored
    assert ignored["upstream"] == requests_per_pull, ignored
    assert ignored["peers_counted"] == {"a": {}, "b": {}}, ignored

    assert a.verdict().verdict == b.verdict().verdict == "used"
    assert c.verdict().verdict == "ignored"
    for key, m, node in zip(ROWS, (miss, hit, again, ignored), (b, a, a, c), strict=True):
        check_row(key, row(key, m, node.verdict()))


@pytest.mark.unit
def test_the_doc_holds_a_row_for_each_pull_and_no_other():
    assert tuple(TABLE.rows()) == ROWS
