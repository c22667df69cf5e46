"""The kwok fleet at size: what the control plane costs with thousands of Nodes and tens of
thousands of pods on this machine (testbed/fleet.py).

    flock /var/lock/kse-bigrun.lock python -m bench.fleet [--sizes 2500:25000,7500:150000]
        [--bind scheduler|direct] [--lease-seconds 40] [--pods-timeout 900] [--rest 60]
        [--cluster-scale "ARGS"] [--out FILE]

For each NODES:PODS size it brings up a fresh fleet (main and events etcd 3.7, the 1.37
API server, scheduler, controller-manager, kwok), then times:

- registering the Nodes (16 concurrent writers) and until kwok has made them all Ready;
- the workload, with `--bind scheduler`: Deployments of 2,000 pods (10% of the Nodes are
  the GPU pool, with one GPU pod per GPU node), created by the ReplicaSet controller,
  bound by the scheduler, played Running by kwok; until every pod is Ready or
  --pods-timeout passes, in which case the pods Running by then are what is reported.
  With `--bind direct` the pods are written already bound (spec.nodeName) with the
  Running status a kubelet reports (Fleet.create_bound_pods), in the same mix: one
  balloon pod every BALLOON_EVERY Nodes, one GPU pod per GPU Node, the rest pause pods
  spread over the CPU pool; until all are made or --pods-timeout passes. That is for
  sizes where the scheduler, not the API server, is the bottleneck on these two cores;
- --rest seconds at rest afterwards (Leases renewing, Node status every 5 minutes).

`--lease-seconds` sets kwok's Node Lease (renewed every quarter of it); the
controller-manager's node grace periods keep the kubelet's proportions to it
(testbed/fleet.py `node_grace_args`). `--cluster-scale "ARGS"` then runs bench.cluster_scale
(with ARGS, its own options) on the same fleet before it is stopped: the exporter beside
kube-state-metrics at this size without bringing a second fleet up.

It records each process's RSS and CPU per phase, etcd's database sizes, the events etcd's
event count, and writes bench/results/fleet.md (or --out). There is no peer: the control
plane is the thing measured. The machine is shared: the load average is printed beside
each run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from bench import peers
from testbed.builds import CONTROL_PLANE_ETCD, etcd_version, kube_binary, kwok_binary, version_line
from testbed.etcd_server import etcd_metric
from testbed.fleet import Fleet, FleetSize, etcd_keys, node_grace_args
from testbed.procs import cpu_seconds, rss_mib

RESULTS = peers.ROOT / "bench" / "results" / "fleet.md"
# The workload's mix: a GPU pool of one Node in GPU_EVERY, one GPU pod per GPU Node, and
# one balloon pod every BALLOON_EVERY Nodes (bench.cluster_scale ran 20 on 500 Nodes).
GPU_EVERY = 10
BALLOON_EVERY = 25


def snapshot(f: Fleet) -> dict:
    """{process: (RSS MiB, peak RSS MiB, CPU seconds)} now."""
    return {n: (*rss_mib(p.pid), cpu_seconds(p.pid)) for n, p in f.procs().items()}


def db_mib(etcd) -> float:
    return etcd_metric(etcd.session(), etcd.client_url, "etcd_mvcc_db_total_size_in_bytes") / 2**20


def run_size(nodes: int, pods: int, opts, runs: list) -> None:
    """One size, appended to `runs` (the sizes so far) and reported with them before
    anything else runs on the fleet (--cluster-scale): a later failure keeps it."""
    gpu_nodes = nodes // GPU_EVERY
    balloons = nodes // BALLOON_EVERY if opts.bind == "direct" else 0
    size = FleetSize(
        nodes=nodes,
        gpu_nodes=gpu_nodes,
        pods=pods - gpu_nodes - balloons,
        gpu_pods=gpu_nodes,
        lease_seconds=opts.lease_seconds,
    )
    work = tempfile.mkdtemp(prefix="fleet-bench-", dir="/var/tmp")
    result = {"nodes": nodes, "pods_wanted": pods, "load_start": os.getloadavg()}
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
        if opts.bind == "direct":
            cpu_nodes = nodes - gpu_nodes
            per_node = (pods - gpu_nodes - balloons) // cpu_nodes
            made = f.create_bound_pods(
                per_node, gpu_pods=gpu_nodes, balloons=balloons, until=t + opts.pods_timeout
            )
            wanted = per_node * cpu_nodes + gpu_nodes + balloons
            result["complete"] = made == wanted
            result["pods_wanted"] = wanted
            result["pods_running"] = made
            result["mix"] = {
                "balloons": balloons,
                "gpu": gpu_nodes,
                "cpu": made - balloons - gpu_nodes,
                "per_node": per_node,
            }
        else:
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
            result["pods_running"] = f.running_pods()
        result["pods_s"] = time.monotonic() - t
        print(f"  {result['pods_running']} pods in {result['pods_s']:.0f}s", flush=True)
        s2 = snapshot(f)
        time.sleep(opts.rest)
        s3 = snapshot(f)
        result["phases"] = {
            "nodes": (s0, s1, result["nodes_ready_s"]),
            "pods": (s1, s2, result["pods_s"]),
            "rest": (s2, s3, opts.rest),
        }
        result["final"] = s3
        result["ready_at_end"] = f.ready_nodes()
        result["db_main_mib"] = db_mib(f.main_etcd)
        result["db_events_mib"] = db_mib(f.events_etcd)
        result["events"] = etcd_keys(f.events_etcd, "/registry/events/")
        result["events_in_main"] = etcd_keys(f.main_etcd, "/registry/events/")
        result["leases"] = etcd_keys(f.main_etcd, "/registry/leases/kube-node-lease/")
        result["load_end"] = os.getloadavg()
        runs.append(result)
        print(result, flush=True)
        write(opts, runs)
        if opts.cluster_scale is not None:
            from bench import cluster_scale  # noqa: PLC0415  (only when asked)

            cluster_scale.run_on(f, opts.cluster_scale.split(), result["pods_running"], opts)
    finally:
        f.stop()
        shutil.rmtree(work, ignore_errors=True)


def loads(avg) -> str:
    return " / ".join(f"{x:.1f}" for x in avg)


def write(opts, runs):
    names = list(runs[0]["final"])
    grace = " and ".join(a.removeprefix("--") for a in node_grace_args(opts.lease_seconds))
    direct = opts.bind == "direct"
    lines = [
        "# The kwok fleet: control-plane cost at size",
        "",
        f"kube-apiserver, kube-scheduler, kube-controller-manager "
        f"{version_line(kube_binary('kube-apiserver'))}; etcd {etcd_version(CONTROL_PLANE_ETCD)} (main and "
        f"events); {version_line(kwok_binary())}; harness: {peers.ours()}; machine: 2 cores, "
        "24 GiB, shared with other sessions (load averages, 1/5/15 min, at start and end "
        f"below). Node Leases of {opts.lease_seconds} s (kwok renews every "
        f"{opts.lease_seconds / 4:g} s), the controller-manager's {grace}; "
        f"one Node in {GPU_EVERY} is the GPU pool. "
        + (
            "Pods bound directly (created with spec.nodeName and the Running status a "
            "kubelet reports; no scheduler binding, kwok leaves them alone): one balloon "
            f"every {BALLOON_EVERY} Nodes, one GPU pod per GPU Node, the rest pause pods "
            "over the CPU pool. "
            if direct
            else "Pods from Deployments, bound by the scheduler, played Running by kwok. "
        )
        + f"`python -m bench.fleet --sizes {opts.sizes} --bind {opts.bind} --lease-seconds "
        f"{opts.lease_seconds} --pods-timeout {opts.pods_timeout:g} --rest {opts.rest:g}"
        + (f' --cluster-scale "{opts.cluster_scale}"' if opts.cluster_scale else "")
        + "`.",
        "",
        "| | " + " | ".join(f"{r['nodes']} nodes" for r in runs) + " |",
        "|---|" + "---:|" * len(runs),
    ]

    def row(label, fn):
        lines.append(f"| {label} | " + " | ".join(fn(r) for r in runs) + " |")

    row("load averages at start", lambda r: loads(r["load_start"]))
    row("load averages at end", lambda r: loads(r["load_end"]))
    row("control plane up, s", lambda r: f"{r['start_s']:.1f}")
    row(
        "Nodes registered, s (Nodes/s)",
        lambda r: f"{r['nodes_created_s']:.1f} ({r['nodes'] / r['nodes_created_s']:.0f})",
    )
    row("... all Ready (kwok), s", lambda r: f"{r['nodes_ready_s']:.1f}")
    row("Nodes Ready at the end", lambda r: str(r["ready_at_end"]))
    row(
        "pods wanted / Running",
        lambda r: (
            f"{r['pods_wanted']} / {r['pods_running']}" + ("" if r["complete"] else " (timed out)")
        ),
    )
    if direct:
        row(
            "... balloons / GPU pods / pause pods (per CPU Node)",
            lambda r: (
                f"{r['mix']['balloons']} / {r['mix']['gpu']} / {r['mix']['cpu']} "
                f"({r['mix']['cpu'] / (r['nodes'] - r['nodes'] // GPU_EVERY):.1f})"
            ),
        )
        row("pods: created bound, status written, s", lambda r: f"{r['pods_s']:.0f}")
    else:
        row("pods: create -> bound -> Running, s", lambda r: f"{r['pods_s']:.0f}")
    row("pods Running per s", lambda r: f"{r['pods_running'] / r['pods_s']:.0f}")
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
        "`nodes` from the first Node written to all Ready, `pods` from the first pod written "
        "to all Running (or the timeout), `rest` the quiet time after. The machine's two "
        "cores are shared by all six processes and the harness (and by other sessions), so "
        "a phase's pace is what is left of them. "
        + (
            "Events: pods bound directly get no `Scheduled` event (no scheduler binds them) "
            "and no `Started` (kwok does not play them)."
            if direct
            else "Events: kwok's `Started` per pod goes through client-go's event "
            "broadcaster, which drops what does not fit its 1,000-event queue when pods "
            "start faster than it posts; the scheduler's `Scheduled` per pod is there."
        ),
    ]
    peers.report(Path(opts.out), lines)


def main():
    # A SIGTERM (from timeout) unwinds like an exception, so the fleet's
    # processes are stopped by the `finally` that started them.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="2500:25000,7500:150000", help="NODES:PODS,...")
    p.add_argument("--pods-timeout", type=float, default=900.0)
    p.add_argument("--rest", type=float, default=60.0)
    p.add_argument("--lease-seconds", type=int, default=40)
    p.add_argument(
        "--bind",
        choices=("scheduler", "direct"),
        default="scheduler",
        help="pods from Deployments the scheduler binds, or written already bound",
    )
    p.add_argument(
        "--cluster-scale",
        metavar="ARGS",
        help="then run bench.cluster_scale with ARGS on the same fleet (one size only)",
    )
    p.add_argument("--out", default=str(RESULTS))
    opts = p.parse_args()
    sizes = [tuple(int(x) for x in spec.split(":")) for spec in opts.sizes.split(",")]
    if opts.cluster_scale is not None and len(sizes) != 1:
        p.error("--cluster-scale runs on one size")
    runs = []
    for nodes, pods in sizes:
        print(f"fleet: {nodes} nodes, {pods} pods", flush=True)
        run_size(nodes, pods, opts, runs)


if __name__ == "__main__":
    main()
