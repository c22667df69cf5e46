"""CapacityBuffers past the capacitybuffer collector's cache cap: the cluster-mode exporter's
memory and scrape time with as many buffers as the cap (5,000) and with a flood (100,000).

For each size: a kube-apiserver on an etcd of its own, the CapacityBuffer CRD of the pinned
cluster-autoscaler, one PodTemplate and N buffers on it, each with a status as the
autoscaler writes it. The buffers are written straight into etcd, as the API server stores
them (JSON under /registry/autoscaling.x-k8s.io/capacitybuffers/NAMESPACE/NAME, 128 puts a
transaction): 100,000 POSTs would take many minutes here, and the API server's watch cache
sees these writes as it sees its own. Then the exporter with only this collector, at its
default --capacitybuffer.max-cached-objects, until kubescale_capacitybuffer_buffers reads N;
then its RSS (after 5 scrapes), and the scrapes' wall times.

`python -m bench.capacitybuffer_flood [--sizes 5000,100000]`; writes
bench/results/capacitybuffer_flood.md and .json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import requests

from bench import peers, versions
from kube_scale_exporter.collectors.capacitybuffer.collector import MAX_CACHED_OBJECTS
from testbed.autoscaler import install_capacity_buffer_crd
from testbed.etcd_server import put_many
from testbed.exporter import start_exporter
from testbed.kube_apiserver import apiserver_on_new_etcd, release
from testbed.metrics import parse_exposition, sample
from testbed.procs import cpu_seconds, rss_mib

RESULTS = Path(__file__).resolve().parent / "results"
NAMESPACE = "flood"
GROUP = "autoscaling.x-k8s.io"
SCRAPES = 5
KEY = "/registry/autoscaling.x-k8s.io/capacitybuffers/{ns}/{name}"
WEB_TEMPLATE = {
    "metadata": {"name": "web"},
    "template": {
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ]
        }
    },
}


def stored_buffer(name: str, created: str) -> dict:
    """A v1beta1 CapacityBuffer (the CRD's storage version) as the API server stores one the
    autoscaler has provisioned: 2 replicas of PodTemplate `web`."""
    return {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": str(uuid.uuid4()),
            "generation": 1,
            "creationTimestamp": created,
        },
        "spec": {"podTemplateRef": {"name": "web"}, "replicas": 2},
        "status": {
            "podTemplateRef": {"name": "web"},
            "replicas": 2,
            "conditions": [
                {
                    "type": "ReadyForProvisioning",
                    "status": "True",
                    "reason": "AttributesSetSuccessfully",
                    "message": "ready",
                    "lastTransitionTime": created,
                }
            ],
        },
    }


def write_buffers(api, count: int) -> float:
    """`count` buffers into etcd; the seconds it took."""
    created = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    started = time.monotonic()
    items = (
        (
            KEY.format(ns=NAMESPACE, name=f"b{i:06d}"),
            json.dumps(stored_buffer(f"b{i:06d}", created), separators=(",", ":")),
        )
        for i in range(count)
    )
    put_many(api.etcd.session(), api.etcd.client_url, items)
    return time.monotonic() - started


def scrape(url: str) -> tuple[float, list]:
    started = time.monotonic()
    reply = requests.get(url + "/metrics", timeout=60)
    reply.raise_for_status()
    return time.monotonic() - started, parse_exposition(reply.text)


def one_size(workdir: Path, count: int, say) -> dict:
    with apiserver_on_new_etcd(workdir / f"api-{count}") as api:
        install_capacity_buffer_crd(api.admin)
        api.admin.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        api.admin.create(f"/api/v1/namespaces/{NAMESPACE}/podtemplates", WEB_TEMPLATE)
        wrote = write_buffers(api, count)
        # A page of one: the rest is the API server's count of what it serves.
        page = api.admin.get(f"/apis/{GROUP}/v1beta1/capacitybuffers", limit="1")
        served = len(page["items"]) + page["metadata"].get("remainingItemCount", 0)
        say(f"{count} buffers written to etcd in {wrote:.1f} s; the API server lists {served}")
        kubeconfig = api.write_kubeconfig(workdir / f"kubeconfig-{count}")
        flags = [
            "--mode=cluster",
            "--collector.disable-defaults",
            "--collector.capacitybuffer",
            f"--kube.kubeconfig={kubeconfig}",
        ]
        started = time.monotonic()
        exporter = start_exporter(flags, workdir, timeout=60)
        try:
            seen = None
            deadline = started + 900
            while time.monotonic() < deadline:
                try:
                    _, fams = scrape(exporter.url)
                    seen = sample(fams, "kubescale_capacitybuffer_buffers")
                except (requests.RequestException, AssertionError, KeyError):
                    seen = None
                if seen == count:
                    break
                time.sleep(1.0)
            else:
                raise TimeoutError(f"the exporter counted {seen} of {count} buffers")
            synced = time.monotonic() - started
            # The API server answers 429 while its watch cache of the buffers fills.
            refused = Path(exporter.proc.log_path).read_text().count("429 TooManyRequests")
            say(
                f"the exporter counts {count} buffers after {synced:.1f} s "
                f"({refused} lists answered 429 while the API server's watch cache filled)"
            )
            walls = []
            for _ in range(SCRAPES):
                wall, fams = scrape(exporter.url)
                walls.append(wall)
            rss, peak = rss_mib(exporter.proc.pid)

            def val(name, **labels):
                return sample(fams, name, **labels)

            out = {
                "buffers": count,
                "written_s": round(wrote, 1),
                "counted_after_s": round(synced, 1),
                "refused_429": refused,
                "rss_mib": round(rss, 1),
                "peak_rss_mib": round(peak, 1),
                "cpu_s": round(cpu_seconds(exporter.proc.pid), 1),
                "scrape_wall_s": [round(w, 3) for w in walls],
                "collector_s": round(
                    val("kubescale_scrape_collector_duration_seconds", collector="capacitybuffer"),
                    3,
                ),
                "success": val("kubescale_scrape_collector_success", collector="capacitybuffer"),
                "counted": val("kubescale_capacitybuffer_buffers"),
                "not_cached": val(
                    "kubescale_capacitybuffer_objects_not_cached", resource="capacitybuffers"
                ),
                "untracked_cache_full": val(
                    "kubescale_capacitybuffer_buffers_untracked", reason="cache_full"
                ),
                "reserved_cpu": val(
                    "kubescale_capacitybuffer_cluster_reserved", resource="cpu", unit="core"
                ),
                "over_cap": val("kubescale_capacitybuffer_buffers_over_cap"),
            }
            say(json.dumps(out))
            return out
        finally:
            exporter.proc.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=f"{MAX_CACHED_OBJECTS},100000")
    opts = ap.parse_args()
    say = peers.Log()

    load_start = os.getloadavg()[0]
    workdir = Path(tempfile.mkdtemp(prefix="bench-cbflood-", dir="/tmp"))
    try:
        runs = [one_size(workdir, int(n), say) for n in opts.sizes.split(",")]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result = {
        "sizes": opts.sizes,
        "cap": MAX_CACHED_OBJECTS,
        "kubernetes": release(),
        "ours": versions.ours(),
        "load": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "runs": runs,
        "log": say.lines,
    }
    (RESULTS / "capacitybuffer_flood.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "capacitybuffer_flood.md").write_text(report(result))


def report(r: dict) -> str:
    runs = r["runs"]

    def row(label, fn):
        return f"| {label} | " + " | ".join(fn(x) for x in runs) + " |"

    head = "| buffers | " + " | ".join(f"{x['buffers']:,}" for x in runs) + " |"
    return "\n".join(
        [
            "# CapacityBuffers past the collector's cache cap",
            "",
            f"kube-apiserver {r['kubernetes']} on an etcd of its own; ours: {r['ours']}; "
            f"machine: 2 cores, shared with other sessions' builds and tests (load average "
            f"{r['load'][0]} at start, {r['load'][1]} at the end; wall times are noisy). "
            f"`python -m bench.capacitybuffer_flood --sizes {r['sizes']}`: the buffers "
            "written straight into etcd, the exporter with only the capacitybuffer "
            f"collector at its default --capacitybuffer.max-cached-objects ({r['cap']:,}).",
            "",
            head,
            "|---|" + "---:|" * len(runs),
            row("kubescale_capacitybuffer_buffers", lambda x: f"{x['counted']:,.0f}"),
            row(
                "kubescale_capacitybuffer_objects_not_cached{resource=capacitybuffers}",
                lambda x: f"{x['not_cached']:,.0f}",
            ),
            row(
                "kubescale_capacitybuffer_buffers_untracked{reason=cache_full}",
                lambda x: f"{x['untracked_cache_full']:,.0f}",
            ),
            row(
                "kubescale_capacitybuffer_cluster_reserved, cpu",
                lambda x: f"{x['reserved_cpu']:,.0f}",
            ),
            row("collector success", lambda x: f"{x['success']:.0f}"),
            row("counted after, s", lambda x: f"{x['counted_after_s']:.1f}"),
            row(
                "lists answered 429 meanwhile (the watch cache filling)",
                lambda x: str(x["refused_429"]),
            ),
            row("exporter RSS, MiB", lambda x: f"{x['rss_mib']:.1f}"),
            row("exporter peak RSS, MiB", lambda x: f"{x['peak_rss_mib']:.1f}"),
            row("exporter CPU to then, s", lambda x: f"{x['cpu_s']:.1f}"),
            row("slowest of 5 scrapes, s", lambda x: f"{max(x['scrape_wall_s']):.3f}"),
            row("the collector's part of the last, s", lambda x: f"{x['collector_s']:.3f}"),
            "",
            "```",
            *r["log"],
            "```",
            "",
        ]
    )


if __name__ == "__main__":
    main()
