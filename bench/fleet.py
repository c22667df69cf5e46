"""The kwok fleet at size: what the control plane costs with thousands of Nodes and tens of
thousands of pods on this machine (testbed/fleet.py).

    flock /var/lock/kse-bigrun.lock python -m bench.fleet [--sizes 2500:25000,7500:150000]
                                                   [--pods-timeout 900] [--rest 60]

For each NODES:PODS size it brings up a fresh fleet (main and events etcd 3.6, the 1.34
API server, scheduler, controller-manager, kwok), then times:

- registering the Nodes (16 concurrent writers) and until kwok has made them all Ready;
- the workload: Deployments of 2,000 pods (10% of the Nodes are the GPU pool, with one
  GPU pod per GPU node), created by the ReplicaSet controller, bound by the scheduler,
  played Running by kwok; until every pod is Ready or --pods-timeout passes, in which
  case the pods Running by then are what is reported;
- --rest seconds at rest afterwards (Leases renewing, Node status every 5 minutes).

It records each process's RSS and CPU per phase, etcd's database sizes, the events etcd's
event count, and writes bench/results/fleet.md. There is no peer: the control plane is the
thing measured. The machine is shared: the load average is printed beside each run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time

from bench import peers
from testbed.builds import CONTROL_PLANE_ETCD, etcd_version, kube_binary, kwok_binary, version_line
from testbed.etcd_server import etcd_metric
from testbed.fleet import Fleet, FleetSize, etcd_keys
from testbed.procs import cpu_seconds, rss_mib

RESULTS = peers.ROOT / "bench" / "results" / "fleet.md"


def snapshot(f: Fleet) -> dict:
    """{process: (RSS MiB, peak RSS MiB, CPU seconds)} now."""
    return {n: (*rss_mib(p.pid), cpu_seconds(p.pid)) for n, p in f.procs().items()}


def db_mib(etcd) -> float:
    return etcd_metric(etcd.session(), etcd.client_url, "etcd_mvcc_db_total_size_in_bytes") / 2**20


def run_size(nodes: int, pods: int, opts) -> dict:
    gpu_nodes = nodes // 10
    size = FleetSize(
        nodes=nodes,
        gpu_nodes=gpu_nodes,
        pods=pods - gpu_nodes,
        gpu_pods=gpu_nodes,
        lease_seconds=opts.lease_seconds,
    )
    work = tempfile.mkdtemp(prefix="fleet-bench-", dir="/var/tmp")
    result = {"nodes": nodes, "pods_wanted": pods, "load_start": os.getloadavg()[0]}
    f = Fleet(work, size)
    try:
        t = time.monotonic()
        f.start()
        result["start_s"] = time.monotonic() - t
        s0 = snapshot(f)
        t = time.monotonic()
        f.create_nodes()
        result["nodes_created_s"] = time.monotonic() - t
        f.wait_nodes_ready(timeout=1200)
        result["nodes_ready_s"] = time.monotonic() - t
        s1 = snapshot(f)
        t = time.monotonic()
        f.create_workload()
        progress = []

        def note(running):
            progress.append((time.monotonic() - t, running))
            if len(progress) % 15 == 0:
                print(
                    f"  {nodes} nodes: {running} pods ready after {progress[-1][0]:.0f}s",
                    flush=True,
                )

        try:
            f.wait_pods_running(timeout=opts.pods_timeout, progress=note)
            result["complete"] = True
        except TimeoutError:
            result["complete"] = False
        result["pods_s"] = time.monotonic() - t
        result["pods_running"] = f.running_pods()
        s2 = snapshot(f)
        time.sleep(opts.rest)
        s3 = snapshot(f)
        result["phases"] = {
            "nodes": (s0, s1, result["nodes_ready_s"]),
            "pods": (s1, s2, result["pods_s"]),
            "rest": (s2, s3, opts.rest),
        }
        result["final"] = s3
        result["db_main_mib"] = db_mib(f.main_etcd)
        result["db_events_mib"] = db_mib(f.events_etcd)
        result["events"] = etcd_keys(f.events_etcd, "/registry/events/")
        result["events_in_main"] = etcd_keys(f.main_etcd, "/registry/events/")
        result["leases"] = etcd_keys(f.main_etcd, "/registry/leases/kube-node-lease/")
        result["load_end"] = os.getloadavg()[0]
    finally:
        f.stop()
        shutil.rmtree(work, ignore_errors=True)
    return result


def write(opts, runs):
    names = list(runs[0]["final"])
    lines = [
        "# The kwok fleet: control-plane cost at size",
        "",
        f"kube-apiserver, kube-scheduler, kube-controller-manager "
        f"{version_line(kube_binary('kube-apiserver'))}; etcd {etcd_version(CONTROL_PLANE_ETCD)} (main and "
        f"events); {version_line(kwok_binary())}; harness: {peers.ours()}; machine: 2 cores, "
        "24 GiB, shared with other sessions (load average, 1 min, at start and end below). "
        f"Node Leases of {opts.lease_seconds} s (renewed every {opts.lease_seconds // 4} s); "
        "10% of the Nodes are the GPU pool. `python -m bench.fleet "
        f"--sizes {opts.sizes} --pods-timeout {opts.pods_timeout:g} --rest {opts.rest:g}`.",
        "",
        "| | " + " | ".join(f"{r['nodes']} nodes" for r in runs) + " |",
        "|---|" + "---:|" * len(runs),
    ]

    def row(label, fn):
        lines.append(f"| {label} | " + " | ".join(fn(r) for r in runs) + " |")

    row("load average at start / end", lambda r: f"{r['load_start']:.1f} / {r['load_end']:.1f}")
    row("control plane up, s", lambda r: f"{r['start_s']:.1f}")
    row(
        "Nodes registered, s (Nodes/s)",
        lambda r: f"{r['nodes_created_s']:.1f} ({r['nodes'] / r['nodes_created_s']:.0f})",
    )
    row("... all Ready (kwok), s", lambda r: f"{r['nodes_ready_s']:.1f}")
    row(
        "pods wanted / Ready",
        lambda r: (
            f"{r['pods_wanted']} / {r['pods_running']}" + ("" if r["complete"] else " (timed out)")
        ),
    )
    row("pods: create -> bound -> Running, s", lambda r: f"{r['pods_s']:.0f}")
    row("pods Ready per s", lambda r: f"{r['pods_running'] / r['pods_s']:.0f}")
    for name in names:
        row(
            f"{name} RSS (peak), MiB",
            lambda r, n=name: f"{r['final'][n][0]:.0f} ({r['final'][n][1]:.0f})",
        )
    for phase in ("nodes", "pods", "rest"):
        for name in names:
            row(
                f"{name} CPU, cores, {phase}",
                lambda r, n=name, p=phase: (
                    f"{(r['phases'][p][1][n][2] - r['phases'][p][0][n][2]) / r['phases'][p][2]:.2f}"
                ),
            )
    row(
        "etcd db size main / events, MiB",
        lambda r: f"{r['db_main_mib']:.0f} / {r['db_events_mib']:.0f}",
    )
    row("events in the events etcd / main etcd", lambda r: f"{r['events']} / {r['events_in_main']}")
    row("Node Leases", lambda r: str(r["leases"]))
    lines += [
        "",
        "CPU is each process's user+system time over the phase divided by its wall time: "
        "`nodes` from the first Node written to all Ready, `pods` from the first Deployment to "
        "all pods Ready (or the timeout), `rest` the quiet time after. The machine's two "
        "cores are shared by all six processes and the harness (and by other sessions), so "
        "a phase's pace is what is left of them. Events: kwok's `Started` per pod goes through "
        "client-go's event broadcaster, which drops what does not fit its 1,000-event queue "
        "when pods start faster than it posts; the scheduler's `Scheduled` per pod is there.",
    ]
    lines += opts.notes
    peers.report(RESULTS, lines)


def main():
    # A SIGTERM (from timeout) unwinds like an exception, so the fleet's
    # processes are stopped by the `finally` that started them.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="2500:25000,7500:150000", help="NODES:PODS,...")
    p.add_argument("--pods-timeout", type=float, default=900.0)
    p.add_argument("--rest", type=float, default=60.0)
    p.add_argument("--lease-seconds", type=int, default=40)
    opts = p.parse_args()
    opts.notes = []
    runs = []
    for spec in opts.sizes.split(","):
        nodes, pods = (int(x) for x in spec.split(":"))
        print(f"fleet: {nodes} nodes, {pods} pods", flush=True)
        runs.append(run_size(nodes, pods, opts))
        print(runs[-1], flush=True)
    write(opts, runs)


if __name__ == "__main__":
    main()
