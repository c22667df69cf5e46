"""A cluster-mode relist as a streaming list (watch-list) beside a paged list, on a real
kube-apiserver 1.34.

    python -m bench.kube_watch_list [--pods 20000] [--rounds 3]

Starts a real etcd + kube-apiserver (testbed), creates `--pods` pods shaped like real ones
with a kubelet's status (bench/kube_cache.py's), then, per round and variant (the order
alternating), in a fresh process: an informer lists every pod (the old cache), then a
second informer of the same variant lists them again while the first holds its cache,
as a relist after a 410 does (both keep the balloon collector's POD_FIELDS). Of that
second list it reports:

- time to synced (informer start to wait_synced);
- the exporter's peak RSS during it (VmHWM, reset before it starts);
- the API server's memory during it: the growth of its Go heap in use (go_memstats_
  heap_inuse_bytes sampled every 0.25 s, its peak less before), of its RSS (VmRSS every
  20 ms; the Go runtime keeps freed memory, so a round after a bigger one may show none),
  and the bytes its Go runtime allocated for it (go_memstats_alloc_bytes_total);
- etcd reads: the API server's etcd_requests_total for pods, and etcd's own Range RPCs
  (grpc_server_handled_total; these include the API server's other, background reads).

Writes bench/results/kube_watch_list.md.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import threading
import time
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families

from bench import peers
from bench.kube_cache import create
from testbed.builds import CONTROL_PLANE_ETCD, etcd_version, kube_binary, version_line
from testbed.kube_apiserver import apiserver_on_new_etcd

RESULTS = peers.ROOT / "bench" / "results" / "kube_watch_list.md"
VARIANTS = ("paged", "streaming")
SAMPLE_SECONDS = 0.02
HEAP_SAMPLE_SECONDS = 0.25
HEAP_INUSE = re.compile(r"^go_memstats_heap_inuse_bytes (\S+)$", re.M)

CODE = (
    peers.RSS_MIB
    + r"""
import json, os, sys, time
cfg = json.loads(sys.argv[1])
from kube_scale_exporter import kube
from kube_scale_exporter.collectors.balloon.collector import POD_FIELDS
client = kube.KubeClient(kube.load(cfg["kubeconfig"]))
streaming = cfg["variant"] == "streaming"
def informer():
    return kube.Informer(client, kube.PODS, transform=POD_FIELDS, watch_list=streaming).start()
old = informer()
assert old.wait_synced(600) and old.watch_list == streaming
open(cfg["ready"], "w").close()
while not os.path.exists(cfg["go"]):
    time.sleep(0.01)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # VmHWM from here on: the relist's peak
start = time.perf_counter()
new = informer()
assert new.wait_synced(600) and new.watch_list == streaming
sync_s = time.perf_counter() - start
n = len(new.items())
print(json.dumps({"objects": n, "sync_s": sync_s, "peak": peak_mib(), "rss": rss_mib()}))
"""
)


def vm_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def metric_sum(text, name, **labels):
    return sum(
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def etcd_requests(text):
    """The API server's etcd requests: (resource, operation) -> count."""
    return {
        (s.labels.get("resource"), s.labels.get("operation")): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "etcd_requests_total"
    }


def heap_inuse_mib(api):
    return float(HEAP_INUSE.search(api.admin.request("GET", "/metrics")).group(1)) / 2**20


def server_counts(api):
    api_text = api.admin.request("GET", "/metrics")
    etcd_text = requests.get(api.etcd.client_url + "/metrics", timeout=10).text
    return {
        "alloc": metric_sum(api_text, "go_memstats_alloc_bytes_total"),
        "etcd": etcd_requests(api_text),
        "ranges": metric_sum(etcd_text, "grpc_server_handled_total", grpc_method="Range"),
    }


def one_round(api, kubeconfig, variant, tmp):
    ready, go = Path(tmp) / f"ready-{variant}", Path(tmp) / f"go-{variant}"
    for path in (ready, go):
        path.unlink(missing_ok=True)
    cfg = {"kubeconfig": kubeconfig, "variant": variant, "ready": str(ready), "go": str(go)}
    result = {}
    child = threading.Thread(target=lambda: result.update(peers.run(CODE, cfg)))
    child.start()
    while not ready.exists():
        if not child.is_alive():
            raise RuntimeError(f"{variant}: the child ended before its first list")
        time.sleep(0.05)
    time.sleep(2)  # the first list's garbage and the server's settle
    before, rss_before, heap_before = (
        server_counts(api),
        vm_rss_mib(api.proc.pid),
        heap_inuse_mib(api),
    )
    peak, heap_peak = [rss_before], [heap_before]

    def sample():
        while child.is_alive():
            peak[0] = max(peak[0], vm_rss_mib(api.proc.pid))
            time.sleep(SAMPLE_SECONDS)

    def sample_heap():
        while child.is_alive():
            heap_peak[0] = max(heap_peak[0], heap_inuse_mib(api))
            time.sleep(HEAP_SAMPLE_SECONDS)

    samplers = [threading.Thread(target=sample), threading.Thread(target=sample_heap)]
    go.touch()
    for sampler in samplers:
        sampler.start()
    child.join()
    for sampler in samplers:
        sampler.join()
    after = server_counts(api)
    if not result:
        raise RuntimeError(f"{variant}: the child printed nothing")
    result.update(
        api_rss_growth=peak[0] - rss_before,
        api_heap_growth=heap_peak[0] - heap_before,
        api_alloc_mib=(after["alloc"] - before["alloc"]) / 2**20,
        ranges=after["ranges"] - before["ranges"],
    )
    made = {k: v - before["etcd"].get(k, 0) for k, v in after["etcd"].items()}
    made = {f"{res}/{op}": n for (res, op), n in sorted(made.items()) if n}
    result["etcd_pods"] = sum(n for key, n in made.items() if key.startswith("pods/"))
    result["etcd_requests"] = {k: n for k, n in made.items() if k.startswith("pods/")}
    result["etcd_others"] = sum(n for key, n in made.items() if not key.startswith("pods/"))
    print(variant, result)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()
    runs = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="bench-wl-") as tmp:
        with apiserver_on_new_etcd(tmp, etcd_quota_bytes=4 * 2**30) as api:
            create(api, opts.pods, 0)
            kubeconfig = api.write_kubeconfig(Path(tmp) / "kubeconfig")
            for i in range(opts.rounds):
                order = VARIANTS if i % 2 == 0 else VARIANTS[::-1]
                for variant in order:
                    runs[variant].append(one_round(api, kubeconfig, variant, tmp))
    for variant in VARIANTS:
        assert all(r["objects"] == opts.pods for r in runs[variant]), variant
    write(opts, runs)


ROWS = [
    ("time to synced, s", "sync_s", "{:.2f}"),
    ("exporter peak RSS during the relist, MiB", "peak", "{:.1f}"),
    ("API server Go heap in use, growth at its peak, MiB", "api_heap_growth", "{:.1f}"),
    ("API server RSS growth during the relist, MiB", "api_rss_growth", "{:.1f}"),
    ("API server Go allocations for the relist, MiB", "api_alloc_mib", "{:.0f}"),
    ("etcd requests for pods (the API server's count)", "etcd_pods", "{:.0f}"),
    ("etcd Range RPCs meanwhile (all, background too)", "ranges", "{:.0f}"),
]


def write(opts, runs):
    def med(variant, key):
        return statistics.median(r[key] for r in runs[variant])

    lines = [
        f"# A relist of {opts.pods} pods: streaming list (watch-list) vs paged list",
        "",
        f"Real kube-apiserver {version_line(kube_binary('kube-apiserver'))} (WatchList gate "
        f"at its default, on) on etcd {etcd_version(CONTROL_PLANE_ETCD)}, loopback; ours: {peers.ours()}; "
        f"{opts.rounds} rounds per variant, order alternating, each in a fresh process; "
        "medians; machine: 2 cores, shared (compare within a row).",
        "",
        "| | paged (limit=500) | streaming | paged / streaming |",
        "|---|---:|---:|---:|",
    ]
    for label, key, fmt in ROWS:
        paged, streamed = med("paged", key), med("streaming", key)
        ratio = f"{paged / streamed:.1f}x" if streamed else "-"
        lines.append(f"| {label} | {fmt.format(paged)} | {fmt.format(streamed)} | {ratio} |")
    lines += [
        "",
        "Per round (paged, streaming):",
        "",
    ]
    for variant in VARIANTS:
        for r in runs[variant]:
            lines.append(
                f"- {variant}: "
                + ", ".join(f"{key} {fmt.format(r[key])}" for _, key, fmt in ROWS)
                + "; the API server's etcd requests for pods: "
                + (", ".join(f"{k} {n:.0f}" for k, n in r["etcd_requests"].items()) or "none")
                + f", for other resources: {r['etcd_others']:.0f}"
            )
    lines += [
        "",
        "The relist is a second informer listing while the first holds its cache of every",
        "pod (POD_FIELDS of the balloon collector), as after a 410: the exporter's peak holds",
        "both. `paged`: the informer with watch_list=False, pages of 500 without",
        "resourceVersion (consistent), decoded item by item. `streaming`: a watch with",
        "sendInitialEvents=true, resourceVersionMatch=NotOlderThan, allowWatchBookmarks=true,",
        "synced at the bookmark annotated k8s.io/initial-events-end. The API server's",
        "etcd requests for pods are `get`s of the current revision (one for a consistent",
        "read; its watch caches also ask now and then, as they do for the other",
        "resources), never a list: both variants are served from the watch cache.",
    ]
    peers.report(RESULTS, lines)


if __name__ == "__main__":
    main()
