"""What an informer's cache costs per 10,000 objects: the whole object (less managedFields,
as the balloon collector's pods informer kept them) beside the fields its collector
declares (kube.Fields, dropped as each object is decoded).

    python -m bench.kube_cache [--pods 10000] [--events 10000]

Starts a real etcd + kube-apiserver (testbed), creates `--pods` pods shaped like real ones
(bench/kube_list.py's, with the status a kubelet writes: Running, five conditions, two
container statuses) and `--events` kubelet-style Pulled events, then lists them into one
informer per variant, each in a fresh process, and reports the RSS the synced cache adds
(after a full collection), per 10,000 objects.
Writes bench/results/kube_cache.md.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import peers
from bench.kube_list import realistic_pod
from testbed.builds import CONTROL_PLANE_ETCD, etcd_version, kube_binary, version_line
from testbed.kube_apiserver import apiserver_on_new_etcd

RESULTS = peers.ROOT / "bench" / "results" / "kube_cache.md"

CODE = (
    peers.RSS_MIB
    + r"""
import gc, json, sys
cfg = json.loads(sys.argv[1])
from kube_scale_exporter import kube
from kube_scale_exporter.collectors.balloon.collector import POD_FIELDS
from kube_scale_exporter.collectors.imagepull_events import EVENT_FIELDS, event_summary
from kube_scale_exporter.kube.listing import strip_managed_fields
TRANSFORMS = {
    "whole": strip_managed_fields,
    "pod_fields": POD_FIELDS,
    "event_fields": EVENT_FIELDS.then(event_summary),
}
resource = kube.PODS if cfg["resource"] == "pods" else kube.Resource("/api/v1", "events")
client = kube.KubeClient(kube.load(cfg["kubeconfig"]))
client.get("/version")  # the connection and TLS set up before the baseline
gc.collect()
before = rss_mib()
inf = kube.Informer(client, resource, transform=TRANSFORMS[cfg["transform"]]).start()
assert inf.wait_synced(300)
n = len(inf.items())
inf.stop()
gc.collect()
print(json.dumps({"objects": n, "rss_added": rss_mib() - before, "peak": peak_mib()}))
"""
)

RUNNING_STATUS = {
    "phase": "Running",
    "hostIP": "10.0.3.17",
    "podIP": "10.244.3.201",
    "podIPs": [{"ip": "10.244.3.201"}],
    "startTime": "2026-12-01T10:00:00Z",
    "qosClass": "Burstable",
    "conditions": [
        {"type": t, "status": "True", "lastTransitionTime": "2026-12-01T10:00:05Z"}
        for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
    ]
    + [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-01T10:00:00Z"}],
    "containerStatuses": [
        {
            "name": name,
            "image": f"{name}:1.0",
            "imageID": f"docker.io/library/{name}@sha256:{'ab' * 32}",
            "containerID": f"containerd://{'cd' * 32}",
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": "2026-12-01T10:00:04Z"}},
        }
        for name in ("pause", "sidecar")
    ],
}


def pulled_event(i):
    return {
        "metadata": {"name": f"pod-{i:05d}.pulled"},
        "involvedObject": {
            "kind": "Pod",
            "namespace": "default",
            "name": f"pod-{i:05d}",
            "uid": f"00000000-0000-0000-0000-{i:012d}",
            "apiVersion": "v1",
            "fieldPath": "spec.containers{main}",
        },
        "reason": "Pulled",
        "message": f'Successfully pulled image "registry.example.com/team/app:{i % 50}" '
        "in 1.2s (3.4s including waiting). Image size: 123456789 bytes.",
        "source": {"component": "kubelet", "host": f"node-{i % 500}"},
        "firstTimestamp": "2026-12-01T10:00:00Z",
        "lastTimestamp": "2026-12-01T10:00:00Z",
        "count": 1,
        "type": "Normal",
        "reportingComponent": "kubelet",
        "reportingInstance": f"node-{i % 500}",
    }


def patient(call, *args):
    """A write retried on a 500 (a loaded machine's etcd times out now and then); a 409
    after one means the timed-out attempt got through."""
    for attempt in range(5):
        try:
            return call(*args)
        except AssertionError as exc:
            if attempt and ": 409 " in str(exc):
                return None
            if ": 500 " not in str(exc) or attempt == 4:
                raise
            time.sleep(1)
    return None


def create(api, pods, events):
    base = "/api/v1/namespaces/default"

    def pod(i):
        body = realistic_pod(i, 500)
        name = body["metadata"]["name"]
        patient(api.admin.create, f"{base}/pods", body)
        patient(api.admin.merge_patch, f"{base}/pods/{name}/status", {"status": RUNNING_STATUS})

    start = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(pod, range(pods)))
        list(
            pool.map(
                lambda i: patient(api.admin.create, f"{base}/events", pulled_event(i)),
                range(events),
            )
        )
    print(f"created {pods} pods and {events} events in {time.perf_counter() - start:.1f}s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=10_000)
    ap.add_argument("--events", type=int, default=10_000)
    opts = ap.parse_args()
    variants = [
        ("pods", "whole"),
        ("pods", "pod_fields"),
        ("events", "whole"),
        ("events", "event_fields"),
    ]
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as tmp:
        with apiserver_on_new_etcd(tmp, etcd_quota_bytes=4 * 2**30) as api:
            create(api, opts.pods, opts.events)
            kubeconfig = api.write_kubeconfig(Path(tmp) / "kubeconfig")
            runs = {
                v: peers.run(CODE, {"kubeconfig": kubeconfig, "resource": v[0], "transform": v[1]})
                for v in variants
            }
    write(opts, runs)


def write(opts, runs):
    def per10k(r, key, scale):
        return r[key] * scale * 10_000 / r["objects"]

    lines = [
        f"# Informer cache memory: {opts.pods} pods, {opts.events} Pulled events",
        "",
        f"Real kube-apiserver {version_line(kube_binary('kube-apiserver'))} on etcd "
        f"{etcd_version(CONTROL_PLANE_ETCD)}, loopback; ours: {peers.ours()}; each variant in a fresh process; "
        "machine: 2 cores, shared.",
        "",
        "| objects | cached as | objects listed | RSS added per 10,000, MiB | whole / this |",
        "|---|---|---:|---:|---:|",
    ]
    for resource, whole in (
        ("pods", runs[("pods", "whole")]),
        ("events", runs[("events", "whole")]),
    ):
        for (res, transform), r in runs.items():
            if res != resource:
                continue
            rss = per10k(r, "rss_added", 1)
            ratio = per10k(whole, "rss_added", 1) / rss
            lines.append(f"| {res} | {transform} | {r['objects']} | {rss:.1f} | {ratio:.1f}x |")
    lines += [
        "",
        "`whole`: the object as listed, less managedFields (what the balloon collector's pods",
        "informer kept before it declared its fields). `pod_fields`: the balloon collector's",
        "POD_FIELDS (kube_scale_exporter/collectors/balloon/collector.py). `event_fields`: the",
        "imagepull_events collector's EVENT_FIELDS then event_summary. RSS added is the",
        "process's resident memory with the synced cache, less before the informer started,",
        "after a full collection (pages the allocator keeps after the list's garbage count).",
    ]
    peers.report(RESULTS, lines)


if __name__ == "__main__":
    main()
