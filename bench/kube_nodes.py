"""What node mode costs the API server: many nodes' informers beside a naive peer.

    python -m bench.kube_nodes [--nodes 50] [--pods-per-node 20] [--churn-seconds 20]

Starts a real etcd + kube-apiserver (testbed) and `--nodes` x `--pods-per-node`
pods, then simulates one exporter per node, all in this process:

- ours: `kube.for_node` informers (spec.nodeName field selector, first list from the API
  server's watch cache, one watch resumed from bookmarks);
- peer: what a careless per-node agent does: a list of every pod (on 1.34 a streaming
  list from the watch cache, as the informer asks for a full list), then a watch of every
  pod, filtering for its node on the client.

For each it measures the start (all caches synced) and `--churn-seconds` of pod status
updates at 10 per second: API server and etcd CPU seconds, requests by verb at the API
server, LIST reply bytes at start and all the pod bytes sent to the clients (the API
server's own apiserver_response_sizes, LIST and WATCH).
Results go to bench/results/kube_nodes.md.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kube_scale_exporter import kube
from testbed.builds import CONTROL_PLANE_ETCD, etcd_version, kube_binary, version_line
from testbed.kube_apiserver import apiserver_on_new_etcd, pod_manifest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "kube_nodes.md"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def node_only(node):
    """The peer's client-side filter: keep a small record of this node's pods only."""

    def transform(pod):
        if (pod.get("spec") or {}).get("nodeName") != node:
            return {
                "metadata": {
                    "name": pod["metadata"]["name"],
                    "namespace": pod["metadata"].get("namespace"),
                    "resourceVersion": pod["metadata"].get("resourceVersion"),
                }
            }
        return pod

    return transform


class EventCount:
    """Watch events delivered to the clients' handlers, over all simulated nodes."""

    def __init__(self):
        self.n = 0
        self._lock = threading.Lock()  # handlers run on many informer threads at once

    def __call__(self, *objs):
        with self._lock:
            self.n += 1


def measure(api, etcd, make_informers, churn_seconds, pods):
    def counts():
        """Pod LIST and WATCH requests and the bytes their replies sent, as the server saw
        them. A streaming list (1.34's default for a full list) is a WATCH; a watch's bytes
        are recorded when it ends. Not apiserver_watch_events_sizes: from 1.29 it counts an
        event once however many watchers it is sent to (kubernetes#135367)."""
        found = {}
        for verb in ("LIST", "WATCH"):
            found[verb] = api.metric_sum("apiserver_request_total", resource="pods", verb=verb)
            found[verb + " bytes"] = api.metric_sum(
                "apiserver_response_sizes_sum", resource="pods", verb=verb
            )
        return found

    before = (cpu_seconds(api.proc.pid), cpu_seconds(etcd.proc.pid), counts())
    start = time.perf_counter()
    events = EventCount()
    informers = make_informers(events)
    for inf in informers:
        inf.start()
    for inf in informers:
        assert inf.wait_synced(300)
    sync_s = time.perf_counter() - start
    synced = (cpu_seconds(api.proc.pid), cpu_seconds(etcd.proc.pid), counts())
    events_at_sync = events.n

    rng = random.Random(1)
    deadline = time.monotonic() + churn_seconds
    updates = 0
    while time.monotonic() < deadline:
        ns, name = rng.choice(pods)  # a new message each time: an unchanged pod has no event
        api.admin.merge_patch(
            f"/api/v1/namespaces/{ns}/pods/{name}/status",
            {"status": {"message": f"churn {time.time_ns()}"}},
        )
        updates += 1
        time.sleep(0.1)
    # Let the last events arrive: until the count stays put for 2 s (at most 30 s).
    churn_end, last, stable_since = time.monotonic(), -1, time.monotonic()
    while time.monotonic() - stable_since < 2 and time.monotonic() - churn_end < 30:
        if events.n != last:
            last, stable_since = events.n, time.monotonic()
        time.sleep(0.1)
    print(
        f"  events {events.n - events_at_sync}, settled {stable_since - churn_end:.1f}s "
        f"after the churn; watches up {sum(i.health().up for i in informers)}/"
        f"{len(informers)}",
        file=sys.stderr,
    )
    churned = (cpu_seconds(api.proc.pid), cpu_seconds(etcd.proc.pid), counts())
    for inf in informers:
        inf.stop(timeout=0.1)
        inf.client.close()
    # The watches' bytes are counted as the server ends them: until the sum stays put 2 s.
    closed, last, stable_since = time.monotonic(), None, time.monotonic()
    while time.monotonic() - stable_since < 2 and time.monotonic() - closed < 30:
        now = counts()
        if now != last:
            last, stable_since = now, time.monotonic()
        time.sleep(0.2)
    sent = sum(last[v + " bytes"] - before[2][v + " bytes"] for v in ("LIST", "WATCH"))
    return {
        "sync_s": sync_s,
        "start_api_cpu": synced[0] - before[0],
        "start_etcd_cpu": synced[1] - before[1],
        "start_lists": synced[2]["LIST"] - before[2]["LIST"],
        "start_bytes": synced[2]["LIST bytes"] - before[2]["LIST bytes"],
        "churn_api_cpu": churned[0] - synced[0],
        "churn_etcd_cpu": churned[1] - synced[1],
        "sent_bytes": sent,
        "watches": last["WATCH"] - before[2]["WATCH"],
        "updates": updates,
        "churn_events": events.n - events_at_sync,
        "relists": sum(inf.health().relists for inf in informers),
        "open_watches": len(informers),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--pods-per-node", type=int, default=20)
    ap.add_argument("--churn-seconds", type=float, default=20)
    opts = ap.parse_args()
    nodes = [f"node-{i}" for i in range(opts.nodes)]

    with tempfile.TemporaryDirectory(prefix="bench-kube-nodes-") as tmp:
        with apiserver_on_new_etcd(tmp, etcd_quota_bytes=2 * 2**30) as api:
            etcd = api.etcd
            pods = [
                ("default", f"{node}-pod-{j}") for node in nodes for j in range(opts.pods_per_node)
            ]
            with ThreadPoolExecutor(8) as pool:
                list(
                    pool.map(
                        lambda p: api.admin.create(
                            "/api/v1/namespaces/default/pods",
                            pod_manifest(
                                p[1], node=p[1].rsplit("-pod-", 1)[0], requests={"cpu": "100m"}
                            ),
                        ),
                        pods,
                    )
                )
            config = kube.load(api.write_kubeconfig(Path(tmp) / "kc"))

            def client():  # each simulated exporter has its own connections
                return kube.KubeClient(config)

            ours = measure(
                api,
                etcd,
                lambda count: [
                    kube.for_node(client(), kube.PODS, node, on_update=count) for node in nodes
                ],
                opts.churn_seconds,
                pods,
            )
            peer = measure(
                api,
                etcd,
                lambda count: [
                    kube.Informer(client(), kube.PODS, transform=node_only(node), on_update=count)
                    for node in nodes
                ],
                opts.churn_seconds,
                pods,
            )

    total = opts.nodes * opts.pods_per_node
    rows = [
        ("time until every node's cache is synced, s", "sync_s", 1),
        ("API server CPU for that start, s", "start_api_cpu", 1),
        ("etcd CPU for that start, s", "start_etcd_cpu", 1),
        ("LIST requests at start", "start_lists", 1),
        ("LIST response bytes at start (gzip above 128 KiB), MiB", "start_bytes", 2**20),
        (f"API server CPU during {opts.churn_seconds:g} s of churn, s", "churn_api_cpu", 1),
        ("etcd CPU during churn, s", "churn_etcd_cpu", 1),
        ("watch events delivered to the clients during churn", "churn_events", 1),
        (
            "pod bytes sent to the clients, start and churn (LIST replies, watch streams), MiB",
            "sent_bytes",
            2**20,
        ),
        ("WATCH requests, start and churn (a streaming list is one)", "watches", 1),
        ("relists", "relists", 1),
    ]
    lines = [
        f"# Node mode at the API server: {opts.nodes} nodes, {total} pods, "
        f"{ours['updates']} status updates in {opts.churn_seconds:g} s",
        "",
        f"Real kube-apiserver {version_line(kube_binary('kube-apiserver'))} on etcd {etcd_version(CONTROL_PLANE_ETCD)}, loopback; one simulated exporter per node. Peer: "
        "a per-node agent that lists and watches every pod and filters on the client. "
        "Machine: 2 cores, shared.",
        "",
        "| measure | node mode (ours) | list+watch all (peer) | peer / ours |",
        "|---|---|---|---|",
    ]
    for name, key, scale in rows:
        a, b = ours[key] / scale, peer[key] / scale
        ratio = f"{b / a:.1f}x" if a else "-"
        lines.append(f"| {name} | {a:.2f} | {b:.2f} | {ratio} |")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.write_text(text)


if __name__ == "__main__":
    main()
