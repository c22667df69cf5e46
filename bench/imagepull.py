"""imagepull collector cost with 50 active ingests and 300 pods on the node.

    python -m bench.imagepull [--ingests 50] [--pods 300] [--scrapes 200]

Starts a real containerd, docker-registry and a slow throttling proxy, pushes images of
five fresh random layers and starts `ctr content fetch` for enough of them that
`--ingests` layers download at once (slowly, so they stay active). Starts etcd and a
real kube-apiserver with `--pods` pods bound to the node, half of them waiting for
images (some present, some not). Then a separate Python process (so the harness does
not count) builds the collector exactly as `kube-scale-exporter --mode node` would,
waits for the pod watch, and times `--scrapes` collects; it reports the import time of
the gRPC transport (h2) and RSS along the way. The peer is what an operator runs by hand for the same
containerd facts: `ctr content active` plus `ctr images ls -q` (Go), timed on the same
containerd. Results go to bench/results/imagepull.md and stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testbed.containerd_server import ContainerdServer
from testbed.etcd_server import EtcdServer
from testbed.kube_apiserver import KubeApiServer, pod_manifest
from testbed.registry_server import RegistryServer
from testbed.throttle_proxy import ThrottleProxy

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "imagepull.md"
NODE = "bench-node"
LAYERS_PER_IMAGE = 5
LAYER_SIZE = 4 << 20
RATE = 16 << 10  # bytes/s per connection: a 4 MiB layer takes minutes, it stays active

# The measured side: runs in its own interpreter, prints one JSON line. The prelude
# (bench.imagepull_sources uses it too) parses the flags as the CLI does.
CHILD_PRELUDE = r"""
import json, sys, time
def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
argv, scrapes = json.loads(sys.argv[1]), int(sys.argv[2])
from kube_scale_exporter.cli import parse
args, classes = parse(argv)
"""
CHILD = (
    CHILD_PRELUDE
    + r"""
out = {"rss_exporter_imported": rss()}
t = time.perf_counter()
import kube_scale_exporter.containerd.grpc_h2
out["h2_import_ms"] = (time.perf_counter() - t) * 1e3
out["rss_h2_imported"] = rss()
(collector,) = [cls(args) for cls in classes]
collector.start()
deadline = time.monotonic() + 60
while collector.pods is not None and not collector.pods.has_synced and time.monotonic() < deadline:
    time.sleep(0.05)
out["pods_cached"] = len(collector.pods.items()) if collector.pods else 0
times = []
for i in range(scrapes + 1):
    t = time.perf_counter()
    families = collector.families(collector.observe())
    times.append(time.perf_counter() - t)
out["first_ms"] = times[0] * 1e3
out["times_ms"] = [x * 1e3 for x in times[1:]]
calls = []
for i in range(50):
    t = time.perf_counter()
    collector.source.client.ingests()
    collector.source.client.image_names([r.name for r in collector.preload])
    calls.append(time.perf_counter() - t)
out["calls_ms"] = sorted(calls)[len(calls) // 2] * 1e3
out["rss_end"] = rss()
out["series"] = {s.name: s.value for f in families for s in f.samples}
collector.close()
print(json.dumps(out))
"""
)


def push_and_fetch(containerd, registry, proxy, ingests, logdir):
    images = max(1, ingests // LAYERS_PER_IMAGE)
    fetches = []
    for i in range(images):
        repo = f"bench{i}-{os.urandom(3).hex()}"
        registry.push_image(repo, "v1", [LAYER_SIZE] * LAYERS_PER_IMAGE)
        fetches.append(containerd.fetch(f"{proxy.host}/{repo}:v1", f"{logdir}/fetch{i}.log"))
    return fetches


def pod_status(image: str, state: dict) -> dict:
    """A status patch: the pod's one container (`pause`) of `image` in `state`, as the
    kubelet writes it (Pending while it waits, Running once it runs)."""
    return {
        "status": {
            "phase": "Pending" if "waiting" in state else "Running",
            "startTime": "2027-01-01T00:00:00Z",
            "containerStatuses": [
                {
                    "name": "pause",
                    "image": image,
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": state,
                }
            ],
        }
    }


def start_apiserver(workdir, pods, present_image, absent_image):

    etcd = EtcdServer(f"{workdir}/etcd").start()
    api = KubeApiServer(f"{workdir}/api", etcd.client_url).start()
    api.etcd = etcd
    base = "/api/v1/namespaces/default/pods"
    for i in range(pods):
        name = f"p{i:04d}"
        body = pod_manifest(name, node=NODE)
        image = present_image if i % 4 == 0 else absent_image if i % 4 == 1 else "pause:3.9"
        body["spec"]["containers"][0]["image"] = image
        api.admin.create(base, body)
        state = (
            {"waiting": {"reason": "ContainerCreating"}}
            if i % 2 == 0 or i % 4 == 1
            else {"running": {"startedAt": "2027-01-01T00:00:00Z"}}
        )
        api.admin.merge_patch(f"{base}/{name}/status", pod_status(image, state))
    return api


def peer(containerd, runs):
    """Wall time of the two ctr listings, and the largest RSS of one ctr process."""
    times, rss = [], 0
    for _ in range(runs):
        t = time.perf_counter()
        for args in (("content", "active"), ("images", "ls", "-q")):
            proc = subprocess.Popen(containerd.ctr_argv(*args), stdout=subprocess.DEVNULL)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode:
                raise RuntimeError(f"ctr {' '.join(args)} exited {proc.returncode}")
            rss = max(rss, usage.ru_maxrss)
        times.append((time.perf_counter() - t) * 1e3)
    return times, rss / 1024


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ingests", type=int, default=50)
    ap.add_argument("--pods", type=int, default=300)
    ap.add_argument("--scrapes", type=int, default=200)
    opts = ap.parse_args()

    load = os.getloadavg()
    work = tempfile.mkdtemp(prefix="ipb-", dir="/tmp")
    started = []
    try:
        containerd = ContainerdServer(f"{work}/cd").start()
        started.append(containerd)
        registry = RegistryServer(f"{work}/reg").start()
        started.append(registry)
        proxy = ThrottleProxy(work, registry.port, RATE)
        started.append(proxy)
        # Present: fetched once at full speed before the slow ones start.
        registry.push_image("present", "v1", [1 << 20])
        present = f"{registry.host}/present:v1"
        containerd.ctr("content", "fetch", "--plain-http", present)
        fetches = push_and_fetch(containerd, registry, proxy, opts.ingests, work)
        started.extend(fetches)
        active = containerd.layers_downloading(opts.ingests)

        api = start_apiserver(work, opts.pods, present, f"{registry.host}/absent:v1")
        started.append(api)
        started.append(api.etcd)
        kubeconfig = api.write_kubeconfig(f"{work}/kubeconfig")

        argv = [
            "--collector.disable-defaults",
            "--collector.imagepull",
            "--containerd.address",
            containerd.address,
            "--kube.kubeconfig",
            kubeconfig,
            "--kube.node-name",
            NODE,
            "--image-pull.preload",
            present,
        ]
        run = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(argv), str(opts.scrapes)],
            check=False,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=600,
        )
        if run.returncode != 0:
            raise SystemExit(f"measured process failed:\n{run.stderr}")
        child = json.loads(run.stdout.splitlines()[-1])
        still = containerd.layers_downloading(0, timeout=0)
        peer_times, peer_rss = peer(containerd, 20)
    finally:
        for thing in reversed(started):
            thing.stop()
        shutil.rmtree(work, ignore_errors=True)

    t = child["times_ms"]
    s = child["series"]
    p50, p99 = statistics.median(t), pct(t, 0.99)
    peer50 = statistics.median(peer_times)
    rows = [
        ("layer ingests active (start / end of run)", f"{active} / {still}"),
        ("pods on the node in the watch cache", f"{child['pods_cached']}"),
        (
            "pulls in progress / queued / stalled",
            (
                f"{s['kubescale_image_pulls_in_progress']:.0f} / "
                f"{s.get('kubescale_image_pulls_queued', float('nan')):.0f} / "
                f"{s['kubescale_image_pull_stalled']:.0f}"
            ),
        ),
        ("first collect (lists manifests once)", f"{child['first_ms']:.1f} ms"),
        (f"collect p50 / p99 / max ({len(t)} scrapes)", f"{p50:.2f} / {p99:.2f} / {max(t):.2f} ms"),
        ("of which the two containerd calls (p50 of 50)", f"{child['calls_ms']:.2f} ms"),
        (
            "peer: `ctr content active` + `ctr images ls -q`, p50 of 20",
            f"{peer50:.1f} ms ({peer50 / p50:.0f}x our p50)",
        ),
        ("gRPC transport (h2) import time", f"{child['h2_import_ms']:.0f} ms"),
        (
            "RSS: exporter imported / + h2 / after the run",
            (
                f"{child['rss_exporter_imported']:.1f} / {child['rss_h2_imported']:.1f} / "
                f"{child['rss_end']:.1f} MiB"
            ),
        ),
        ("peer max RSS (one ctr process)", f"{peer_rss:.1f} MiB"),
    ]
    width = max(len(k) for k, _ in rows)
    text = "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        "# imagepull collector benchmark\n\n"
        f"`python -m bench.imagepull --ingests {opts.ingests} --pods {opts.pods} "
        f"--scrapes {opts.scrapes}` on {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores "
        f"(load average {load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end: "
        f"other jobs share the machine), Python {sys.version.split()[0]}, "
        f"containerd {containerd_version()}.\n\n"
        "| measure | value |\n| --- | --- |\n" + "".join(f"| {k} | {v} |\n" for k, v in rows)
    )
    print(f"\nwritten to {RESULTS.relative_to(ROOT)}")


def containerd_version():
    out = subprocess.run(
        ["containerd", "--version"], check=True, capture_output=True, text=True
    ).stdout
    return out.split()[2] if len(out.split()) > 2 else "?"


if __name__ == "__main__":
    main()
