"""Kubernetes API client cost: our raw-JSON informer beside the official `kubernetes`
client and lightkube.

    python -m bench.kube_list [--pods 2000] [--nodes 50] [--rounds 9]

Starts a real etcd + kube-apiserver (testbed), creates `--pods` pods spread over
`--nodes` node names, then runs each client in its own fresh process:

- cold start: import time and RSS after import;
- cluster-mode relist: a full paged list of all pods (limit=500) decoded into objects,
  `--rounds` times (ours: a new `Informer`, timed from start until its cache is synced;
  `kubernetes`: `list_pod_for_all_namespaces` with `_continue` paging, into its model
  classes; lightkube: `Client.list(Pod, chunk_size=500)`, into its msgspec Structs);
- memory per cached pod: what the objects of one more relist hold (tracemalloc), as an
  informer's cache keeps them;
- node-mode list: one node's pods by fieldSelector spec.nodeName (ours and `kubernetes`
  from the watch cache; lightkube's list has no resourceVersion).

It prints wall and CPU time per round and peak RSS, with ratios, and writes
bench/results/kube_list.md. The peers are installed on first use at pinned versions
(bench/peers.py), outside the project's environment.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import peers
from testbed.builds import CONTROL_PLANE_ETCD, etcd_version, kube_binary, version_line
from testbed.kube_apiserver import apiserver_on_new_etcd, pod_manifest

RESULTS = peers.ROOT / "bench" / "results" / "kube_list.md"
KUBERNETES = ("kubernetes", "37.0.2")
LIGHTKUBE = ("lightkube", "1.0.1")

# Each client runs in a fresh interpreter: argv[1] is the JSON config; it prints JSON.
COMMON = r"""
import json, os, sys, time, tracemalloc
cfg = json.loads(sys.argv[1])
RSS
t0, c0 = time.perf_counter(), time.process_time()
IMPORTS
import_s = time.perf_counter() - t0
rss_import = rss_mib()
walls, cpus = [], []
for _ in range(cfg["rounds"]):
    w, c = time.perf_counter(), time.process_time()
    n = full_list()
    walls.append(time.perf_counter() - w); cpus.append(time.process_time() - c)
    done()
    assert n == cfg["pods"], n
tracemalloc.start()
base = tracemalloc.get_traced_memory()[0]
full_list()
per_pod = (tracemalloc.get_traced_memory()[0] - base) / cfg["pods"]  # what the cache keeps
done()
tracemalloc.stop()
kept = None
w, c = time.perf_counter(), time.process_time()
mine = node_list(cfg["node"])
node_wall, node_cpu = time.perf_counter() - w, time.process_time() - c
done()
print(json.dumps({"import_s": import_s, "rss_import": rss_import, "walls": walls,
                  "cpus": cpus, "node_wall": node_wall, "node_cpu": node_cpu,
                  "node_pods": mine, "per_pod": per_pod,
                  "peak_rss": peak_mib()}))
"""

OURS = COMMON.replace(
    "IMPORTS",
    r"""
from kube_scale_exporter import kube
client = kube.KubeClient(kube.load(cfg["kubeconfig"]))
running = []
def synced(inf):  # timed until the cache is synced; stopping the watch is not
    running.append(inf.start())
    inf.wait_synced(120)
    return len(inf.items())
def full_list():
    return synced(kube.Informer(client, kube.PODS))
def node_list(node):
    return synced(kube.for_node(client, kube.PODS, node))
def done():
    running.pop().stop()
""",
)

KUBERNETES_CODE = COMMON.replace(
    "IMPORTS",
    r"""
import kubernetes
kubernetes.config.load_kube_config(cfg["kubeconfig"])
v1 = kubernetes.client.CoreV1Api()
def full_list():
    global kept
    kept, cont = [], None
    while True:
        page = v1.list_pod_for_all_namespaces(limit=500, _continue=cont)
        kept.extend(page.items)
        cont = page.metadata._continue
        if not cont:
            return len(kept)
def node_list(node):
    return len(v1.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}",
                                              resource_version="0").items)
def done():
    pass
""",
)

LIGHTKUBE_CODE = COMMON.replace(
    "IMPORTS",
    r"""
import lightkube
from lightkube.resources.core_v1 import Pod
config = lightkube.KubeConfig.from_file(cfg["kubeconfig"])
client = lightkube.Client(config=config, trust_env=False)  # as ours: the kubeconfig's CA only
def full_list():
    global kept
    kept = list(client.list(Pod, namespace="*", chunk_size=500))
    return len(kept)
def node_list(node):
    return len(list(client.list(Pod, namespace="*", fields={"spec.nodeName": node})))
def done():
    pass
""",
)


def realistic_pod(i, nodes):
    """A pod shaped like a real one: labels, two containers, env, ports, probes."""
    body = pod_manifest(
        f"pod-{i:05d}",
        node=f"node-{i % nodes}",
        labels={
            "app": f"app-{i % 40}",
            "team": f"team-{i % 7}",
            "pod-template-hash": f"{i * 7919 % 99991:05x}",
        },
        requests={"cpu": "250m", "memory": "512Mi"},
    )
    main = body["spec"]["containers"][0]
    main.update(
        {
            "env": [{"name": f"VAR_{k}", "value": f"value-{k}-{i}"} for k in range(8)],
            "ports": [{"containerPort": 8080, "name": "http"}],
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
        }
    )
    body["spec"]["containers"].append(
        {"name": "sidecar", "image": "sidecar:1.0", "args": ["--listen=:9090", "--verbose"]}
    )
    return body


def create_pods(api, pods, nodes):
    """`pods` realistic pods in the default namespace, spread over `nodes` node names."""
    start = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda i: api.admin.create(
                    "/api/v1/namespaces/default/pods", realistic_pod(i, nodes)
                ),
                range(pods),
            )
        )
    print(f"created {pods} pods in {time.perf_counter() - start:.1f}s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=9)
    opts = ap.parse_args()
    peer_dirs = {"kubernetes": peers.install(*KUBERNETES), "lightkube": peers.install(*LIGHTKUBE)}
    codes = {"ours": OURS, "kubernetes": KUBERNETES_CODE, "lightkube": LIGHTKUBE_CODE}

    with tempfile.TemporaryDirectory(prefix="bench-kube-") as tmp:
        with apiserver_on_new_etcd(tmp, etcd_quota_bytes=2 * 2**30) as api:
            create_pods(api, opts.pods, opts.nodes)
            kubeconfig = api.write_kubeconfig(Path(tmp) / "kubeconfig")
            cfg = {"kubeconfig": kubeconfig, "rounds": opts.rounds, "pods": opts.pods}
            cfg["node"] = "node-0"
            runs = {
                name: peers.run(code.replace("RSS\n", peers.RSS_MIB), cfg, *paths)
                for name, code in codes.items()
                for paths in [[peer_dirs[name]] if name in peer_dirs else []]
            }
    write(opts, runs, {n: peers.versions(d)[n] for n, d in peer_dirs.items()})


def write(opts, runs, peer_versions):
    def med(xs):
        return sorted(xs)[len(xs) // 2]

    ours, k8s, light = runs["ours"], runs["kubernetes"], runs["lightkube"]
    rows = [
        ("import, ms", lambda r: r["import_s"] * 1e3),
        ("RSS after import, MiB", lambda r: r["rss_import"]),
        (f"relist of {opts.pods} pods, wall ms (median)", lambda r: med(r["walls"]) * 1e3),
        (f"relist of {opts.pods} pods, CPU ms (median)", lambda r: med(r["cpus"]) * 1e3),
        ("memory per cached pod, KiB", lambda r: r["per_pod"] / 1024),
        (f"node-mode list ({ours['node_pods']} pods), wall ms", lambda r: r["node_wall"] * 1e3),
        ("peak RSS, MiB", lambda r: r["peak_rss"]),
    ]
    lines = [
        f"# Kubernetes client cost: {opts.pods} pods on {opts.nodes} nodes, {opts.rounds} relists",
        "",
        f"Real kube-apiserver {version_line(kube_binary('kube-apiserver'))} on etcd "
        f"{etcd_version(CONTROL_PLANE_ETCD)}, loopback; ours: {peers.ours()}; peers: `kubernetes` {peer_versions['kubernetes']} (the "
        f"official Python client) and lightkube {peer_versions['lightkube']} (httpx2, msgspec "
        "models); machine: 2 cores, shared.",
        "",
        "| measure | kube-scale-exporter | kubernetes client | kubernetes / ours "
        "| lightkube | lightkube / ours |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, value in rows:
        a, b, c = value(ours), value(k8s), value(light)
        lines.append(f"| {name} | {a:.1f} | {b:.1f} | {b / a:.1f}x | {c:.1f} | {c / a:.1f}x |")
    lines += [
        "",
        "The node-mode line is one list. Ours is timed from starting an informer to its synced",
        "cache, thread start and connection set-up included (the connection its previous watch",
        "used was shut by stop()); the peers' is one request on a kept-alive connection, from",
        "the watch cache for `kubernetes` (resourceVersion=0) and not for lightkube, whose list",
        "takes no resourceVersion. In service it happens once per exporter start. The relist",
        "lines are what a 410 costs in cluster mode. Memory per cached pod is what each keeps",
        "of a pod by default: ours the JSON's dicts less managedFields (the informer drops",
        "them), the peers their model objects.",
    ]
    peers.report(RESULTS, lines)


if __name__ == "__main__":
    main()
