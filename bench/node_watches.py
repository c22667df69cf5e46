"""Node mode's load on the API server: one spec.nodeName pod watch per Node.

    flock /var/lock/kse-bigrun.lock python -m bench.node_watches [--nodes 7500] [--pods-per-node 1]
                                                          [--procs 6] [--window 60] [--kwok]

Brings up a fleet (testbed/fleet.py) of `--nodes` Nodes and `--pods-per-node` pods each,
then opens one watch per Node exactly as the node-mode exporter does: a `KubeClient` of
its own (its own connection, as each DaemonSet pod has) and `kube.for_node(client,
kube.PODS, NODE)`: a list from the watch cache (resourceVersion=0), then one watch with
bookmarks. The watchers run as threads of `--procs` worker processes (this module run
with --worker).

By default the fleet is API objects alone (`Fleet(players=False)`): the etcds and the API
server, Nodes registered as plain objects and pods created already bound by spec.nodeName
with a Running status. A spec.nodeName watch needs only pods bound to its Node, so what is
measured (the watch cache's spec.nodeName index, its watchers, the lists it serves) is the
same; what is left out is the rest of a cluster's traffic: kwok renewing a Lease per Node
every lease_seconds/4 (750 writes a second at 7,500 Nodes, more than two shared cores
keep up with), the scheduler and the controller-manager. `--kwok` runs the full fleet
(kwok Nodes with Leases, Deployments the real scheduler binds) instead.

It measures:

- the API server's RSS, Go heap and stacks (go_memstats_heap_inuse_bytes, _stack_inuse_)
  and CPU over `--window` seconds, with no watchers and with all of them open: the
  difference per watcher;
- the same with an idle kept-alive connection per Node instead (a GET /version each):
  how much of a watch's cost is its TLS connection;
- the same with a bare watch per Node instead: the same pod watch (spec.nodeName, with
  bookmarks, from one resourceVersion) on a connection of its own, opened with no list
  and no informer behind it: the API server's own floor for such a watch, which ours is
  quoted against;
- a simultaneous restart of every watcher (a DaemonSet rollout at its worst: all pods at
  once): each worker stops all its informers and starts new ones, and the harness counts,
  across it, the main etcd's Range requests (etcd's grpc_server_handled_total and
  etcd_mvcc_range_total) against a quiet window of the same length, the API server's pod
  lists from its watch cache (apiserver_storage_list_total{storage="watchcache"}), its consistent reads and its pod
  requests to etcd (etcd_requests_total), and how the relists spread in time;
- an API server restart (the cause that hits every watch at once): etcd's revision moved
  on while it is down, so the new watch cache starts past every informer's
  resourceVersion, each re-watch gets 410 and each informer relists after its random
  NODE_RELIST_JITTER_SECONDS wait: how those relists spread, what they read, and whether
  every informer is back within `--relist-deadline` seconds.

Results go to bench/results/node_watches.md.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from prometheus_client.parser import text_string_to_metric_families

from bench import peers
from kube_scale_exporter.kube.informer import NODE_RELIST_JITTER_SECONDS
from testbed.builds import CONTROL_PLANE_ETCD, etcd_version, kube_binary, kwok_binary, version_line
from testbed.fleet import Fleet, FleetSize
from testbed.procs import cpu_seconds, rss_mib

RESULTS = peers.ROOT / "bench" / "results" / "node_watches.md"


# ---- the worker: N informers in one process, driven by lines on stdin ---------------------
def worker(kubeconfig: str, nodes: list[str], in_flight: int) -> None:
    from kube_scale_exporter import kube  # noqa: PLC0415  (the worker's own process)

    config = kube.load(kubeconfig)
    informers: list = []

    def open_all():
        # At most `in_flight` informers between start and first sync at a time: on two
        # cores, 7,500 Python TLS clients started at once time out their own handshakes
        # (5 s) and retry, a storm that never settles; a node's exporter has its own CPU.
        t0 = time.monotonic()
        made = [kube.for_node(kube.KubeClient(config), kube.PODS, n) for n in nodes]
        pending: list = []
        for inf in made:
            while len(pending) >= in_flight:
                pending = [p for p in pending if not p.has_synced]
                if len(pending) >= in_flight:
                    time.sleep(0.005)
            inf.start()
            pending.append(inf)
        for inf in made:
            inf.wait_synced(600)
        informers[:] = made
        synced = [inf for inf in made if inf.has_synced]
        pods = sum(len(inf.items()) for inf in synced)
        return {"synced": len(synced), "pods": pods, "times": [i._last_sync - t0 for i in synced]}

    def close_all():
        for inf in informers:
            inf._stop.set()  # every watch told first, then joined: all stop at once
            watch = inf._watch
            if watch is not None:
                watch.close()
        for inf in informers:
            inf.stop()
            inf.client.close()

    idle: list = []
    bare: list = []

    def open_bare(rv):
        # The informer's watch alone: same selector and parameters, its own connection,
        # no list before it and nothing reading it (bookmarks wait in the socket).
        def one(node):
            client = kube.KubeClient(config)
            params = {
                "fieldSelector": f"spec.nodeName={node}",
                "allowWatchBookmarks": "true",
                "resourceVersion": rv,
                "timeoutSeconds": "3600",
            }
            for attempt in range(5):  # a handshake past the 5 s connect timeout, on 2 cores
                try:
                    return client, client.watch(kube.PODS.path(), params, 120.0)
                except Exception:  # retried; the fifth failure is raised
                    if attempt == 4:
                        raise
                    time.sleep(1 + attempt)
            raise AssertionError("unreachable")

        with concurrent.futures.ThreadPoolExecutor(in_flight) as pool:
            bare[:] = list(pool.map(one, nodes))

    for line in sys.stdin:
        command, _, arg = line.strip().partition(" ")
        if command == "bare":
            open_bare(arg)
            reply = {"bare": len(bare)}
        elif command == "close_bare":
            for client, watch in bare:
                watch.close()
                client.close()
            reply = {"closed": len(bare)}
            bare.clear()
        elif command == "idle":
            # A kept-alive connection per Node with nothing on it: what the connection
            # alone costs the API server, beside what a watch on it adds.
            idle[:] = [kube.KubeClient(config) for _ in nodes]
            for client in idle:
                client.get("/version")
            reply = {"idle": len(idle)}
        elif command == "close_idle":
            for client in idle:
                client.close()
            reply = {"closed": len(idle)}
            idle.clear()
        elif command == "open":
            reply = open_all()
        elif command == "restart":
            t0 = time.monotonic()
            close_all()
            closed = time.monotonic() - t0
            reply = open_all()
            reply["closed_s"] = closed
        elif command == "relisted":
            # After an API server restart: until every informer has listed once more
            # (after its 410 and jitter) or `arg` seconds have passed; when each did, on
            # the host's monotonic clock.
            deadline = time.monotonic() + float(arg)
            while time.monotonic() < deadline and any(inf._lists < 2 for inf in informers):
                time.sleep(0.2)
            done = [inf._last_sync for inf in informers if inf._lists >= 2]
            reply = {"relisted": len(done), "at": done}
        elif command == "quit":
            close_all()
            return
        else:
            reply = {"error": command}
        print(json.dumps(reply), flush=True)


# ---- the harness --------------------------------------------------------------------------
class CpuLast:
    """A cpu cgroup (v1) of the least weight: its processes get only the CPU the rest of
    the machine leaves. 7,500 exporters share two cores with the control plane here,
    where on a cluster each has its own node; after an API server restart their thousands
    of reconnecting threads would otherwise starve the API server they wait for."""

    SHARES = 2  # the kernel's minimum; a process outside weighs 1024

    def __init__(self, root="/sys/fs/cgroup/cpu"):
        if not (pathlib.Path(root) / "cpu.shares").is_file():
            raise SystemExit(
                f"no cgroup v1 cpu controller at {root} (cpu.shares): run with "
                "--no-watchers-last, and expect the API server restart to starve"
            )
        self.path = pathlib.Path(root) / f"kse-bench-watchers-{os.getpid()}"
        self.path.mkdir()
        (self.path / "cpu.shares").write_text(str(self.SHARES))

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        """Once its processes are gone (a cgroup with members cannot be removed)."""
        self.path.rmdir()


class Workers:
    def __init__(self, kubeconfig, nodes, procs, workdir, in_flight, cpu: CpuLast | None):
        self.procs = []
        chunk = -(-len(nodes) // procs)
        for i in range(procs):
            part = nodes[i * chunk : (i + 1) * chunk]
            path = os.path.join(workdir, f"nodes-{i}.json")
            with open(path, "w") as f:
                json.dump(part, f)
            self.procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "bench.node_watches",
                        "--worker",
                        kubeconfig,
                        path,
                        str(in_flight),
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    cwd=peers.ROOT,
                )
            )
            if cpu is not None:
                cpu.add(self.procs[-1].pid)

    def command(self, word, arg="") -> list[dict]:
        """`word` to every worker at once; their replies."""
        for p in self.procs:
            p.stdin.write(f"{word} {arg}\n")
            p.stdin.flush()
        replies = [None] * len(self.procs)

        def read(i):
            replies[i] = json.loads(self.procs[i].stdout.readline())

        threads = [threading.Thread(target=read, args=(i,)) for i in range(len(self.procs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return replies

    def rss_mib(self) -> float:
        return sum(rss_mib(p.pid)[0] for p in self.procs)

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self.procs)

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.stdin.write("quit\n")
                    p.stdin.flush()
                except BrokenPipeError:
                    pass
        deadline = time.monotonic() + 30  # one shared wait: a busy worker is killed
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def metrics(text, wanted) -> dict:
    """{(name, frozenset(labels)): value} of the families named in `wanted`."""
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in wanted:
                found[(s.name, frozenset(s.labels.items()))] = s.value
    return found


def total(found, name, **labels) -> float:
    return sum(
        v
        for (n, ls), v in found.items()
        if n == name and all(dict(ls).get(k) == x for k, x in labels.items())
    )


API_METRICS = {
    "go_goroutines",
    "go_memstats_heap_inuse_bytes",
    "go_memstats_stack_inuse_bytes",
    "apiserver_storage_list_total",
    "apiserver_storage_list_fetched_objects_total",
    "apiserver_watch_cache_consistent_read_total",
    "etcd_requests_total",
    "apiserver_request_total",
    "apiserver_longrunning_requests",
}
# Pod lists the watch cache served by its spec.nodeName index (1.37 deprecated, and hides,
# apiserver_cache_list_total for these).
BY_NODE_FROM_CACHE = {"resource": "pods", "storage": "watchcache", "index": "f:spec.nodeName"}
ETCD_METRICS = {"grpc_server_handled_total", "etcd_mvcc_range_total"}


class Reading:
    """The API server's and the main etcd's counters, and processes' CPU, at one moment."""

    def __init__(self, f: Fleet):
        self.at = time.monotonic()
        # A heap profile with gc=1 runs a full GC first: the heap read next is what is live
        # (and its fragmentation), not garbage waiting for the next cycle.
        f.admin.request("GET", "/debug/pprof/heap", params={"gc": "1"})
        self.api = metrics(f.admin.request("GET", "/metrics"), API_METRICS)
        etcd = f.main_etcd
        self.etcd = metrics(
            etcd.session().get(etcd.client_url + "/metrics", timeout=30).text, ETCD_METRICS
        )
        self.api_cpu = cpu_seconds(f.api.proc.pid)
        self.etcd_cpu = cpu_seconds(f.main_etcd.proc.pid)
        self.api_rss = rss_mib(f.api.proc.pid)[0]

    def stacks_mib(self):
        return total(self.api, "go_memstats_stack_inuse_bytes") / 2**20

    def heap_mib(self):
        """Go heap and goroutine stacks in use: what a watch's buffers and goroutines take."""
        return (
            total(self.api, "go_memstats_heap_inuse_bytes")
            + total(self.api, "go_memstats_stack_inuse_bytes")
        ) / 2**20


def delta(a: Reading, b: Reading) -> dict:
    def api(name, **labels):
        return total(b.api, name, **labels) - total(a.api, name, **labels)

    def etcd(name, **labels):
        return total(b.etcd, name, **labels) - total(a.etcd, name, **labels)

    return {
        "seconds": b.at - a.at,
        "etcd_range_grpc": etcd("grpc_server_handled_total", grpc_method="Range"),
        "etcd_range_mvcc": etcd("etcd_mvcc_range_total"),
        "api_pod_lists": api("apiserver_request_total", verb="LIST", resource="pods"),
        "cache_pod_lists": api("apiserver_storage_list_total", **BY_NODE_FROM_CACHE),
        "cache_fetched": api("apiserver_storage_list_fetched_objects_total", **BY_NODE_FROM_CACHE),
        "consistent_reads": api("apiserver_watch_cache_consistent_read_total", resource="pods"),
        "etcd_pod_lists": api("etcd_requests_total", operation="list", resource="pods"),
        "etcd_pod_requests": api("etcd_requests_total", resource="pods"),
        "api_cpu": b.api_cpu - a.api_cpu,
        "etcd_cpu": b.etcd_cpu - a.etcd_cpu,
    }


def quantiles(xs):
    xs = sorted(xs)
    return {q: xs[min(len(xs) - 1, int(q * len(xs)))] for q in (0.5, 0.9, 0.99)} | {1.0: xs[-1]}


def run(opts) -> dict:
    size = FleetSize(
        nodes=opts.nodes,
        gpu_nodes=0,
        pods=opts.nodes * opts.pods_per_node,
        gpu_pods=0,
        lease_seconds=opts.lease_seconds,
    )
    cpu = CpuLast() if opts.watchers_last else None  # first: it may refuse
    work = tempfile.mkdtemp(prefix="node-watches-", dir="/var/tmp")
    out = {"load_start": os.getloadavg()[0]}
    # --profiling for /debug/pprof/heap?gc=1 (Reading); the later flag wins.
    f = Fleet(work, size, api_args=["--profiling=true"], players=opts.kwok)
    workers = None
    try:
        f.start()
        t = time.monotonic()
        f.create_nodes()
        out["nodes_created_s"] = time.monotonic() - t
        t = time.monotonic()
        if opts.kwok:
            f.wait_nodes_ready(timeout=1200)
            out["nodes_ready_s"] = time.monotonic() - t
            t = time.monotonic()
            f.create_workload()
            f.wait_pods_running(timeout=opts.pods_timeout)
            out["pods"] = f.running_pods()
        else:
            out["pods"] = f.create_bound_pods(opts.pods_per_node)
        out["pods_s"] = time.monotonic() - t
        out["fleet_rss"] = {name: rss_mib(proc.pid)[0] for name, proc in f.procs().items()}
        time.sleep(10)
        base0 = Reading(f)
        time.sleep(opts.window)
        base1 = Reading(f)
        out["quiet"] = delta(base0, base1)
        out["heap_before"], out["rss_before"] = base1.heap_mib(), base1.api_rss
        out["goroutines_before"] = total(base1.api, "go_goroutines")

        workers = Workers(f.kubeconfig, f.nodes, opts.procs, work, opts.in_flight, cpu)
        workers.command("idle")
        time.sleep(10)
        idle = Reading(f)
        out["heap_idle"], out["rss_idle"] = idle.heap_mib(), idle.api_rss
        out["goroutines_idle"] = total(idle.api, "go_goroutines")
        workers.command("close_idle")
        time.sleep(10)
        # The floor: the same watches, bare, from the resourceVersion of one pod list.
        rv = f.admin.get("/api/v1/pods", limit="1")["metadata"]["resourceVersion"]
        t = time.monotonic()
        workers.command("bare", rv)
        out["bare_open_s"] = time.monotonic() - t
        time.sleep(20)  # as after the informers: goroutines and buffers settle
        bare = Reading(f)
        out["heap_bare"], out["rss_bare"] = bare.heap_mib(), bare.api_rss
        out["goroutines_bare"] = total(bare.api, "go_goroutines")
        out["stacks_bare"] = bare.stacks_mib()
        out["bare_watches"] = total(
            bare.api, "apiserver_longrunning_requests", verb="WATCH", resource="pods"
        )
        workers.command("close_bare")
        time.sleep(10)
        t = time.monotonic()
        opened = workers.command("open")
        out["open_s"] = time.monotonic() - t
        out["open_pods"] = sum(r["pods"] for r in opened)
        out["open_synced"] = sum(r["synced"] for r in opened)
        time.sleep(20)  # watch goroutines and buffers settle, one bookmark round
        open0 = Reading(f)
        time.sleep(opts.window)
        open1 = Reading(f)
        out["open"] = delta(open0, open1)
        out["heap_after"], out["rss_after"] = open1.heap_mib(), open1.api_rss
        out["goroutines_after"] = total(open1.api, "go_goroutines")
        out["stacks_before"], out["stacks_after"] = base1.stacks_mib(), open1.stacks_mib()
        out["watches"] = total(
            open1.api, "apiserver_longrunning_requests", verb="WATCH", resource="pods"
        )
        out["workers_rss"] = workers.rss_mib()

        r0 = Reading(f)
        t = time.monotonic()
        restarted = workers.command("restart")
        out["restart_s"] = time.monotonic() - t
        r1 = Reading(f)
        out["restart"] = delta(r0, r1)
        out["restart_closed_s"] = max(r["closed_s"] for r in restarted)
        out["restart_synced"] = sum(r["synced"] for r in restarted)
        out["restart_times"] = quantiles([x for r in restarted for x in r["times"]])
        # The same length of quiet time right after, for what the fleet itself reads.
        q0 = Reading(f)
        time.sleep(out["restart"]["seconds"])
        q1 = Reading(f)
        out["after_quiet"] = delta(q0, q1)
        if opts.api_restart:
            try:
                out["api_restart"] = restart_api_server(f, workers, opts.relist_deadline)
            except (TimeoutError, RuntimeError) as e:
                # What was measured before it stays; the report says how the restart failed.
                out["api_restart_failed"] = str(e).splitlines()[0]
        out["load_end"] = os.getloadavg()[0]
    finally:
        if workers is not None:
            workers.stop()
        if cpu is not None:
            cpu.remove()
        f.stop()
        shutil.rmtree(work, ignore_errors=True)
    return out


def restart_api_server(f: Fleet, workers: Workers, deadline: float) -> dict:
    """Stop the API server, move etcd's revision on (one key of our own) so the new watch
    cache starts past every informer's resourceVersion, start it again on the same port;
    then until every informer has relisted."""
    out = {}
    watchers_cpu = workers.cpu_seconds()
    f.api.stop()
    put = {"key": base64.b64encode(b"/bench/revision").decode(), "value": ""}
    etcd = f.main_etcd
    etcd.session().post(etcd.client_url + "/v3/kv/put", json=put, timeout=30).raise_for_status()
    e0 = metrics(etcd.session().get(etcd.client_url + "/metrics", timeout=30).text, ETCD_METRICS)
    started = time.monotonic()
    # Every informer reconnecting at once on the same two cores: longer than a quiet start.
    f.api.start(timeout=300)
    out["ready_s"] = time.monotonic() - started
    replies = workers.command("relisted", str(deadline))
    # Who had the CPU until the last relist: the new API server (all of its CPU is since
    # its start) and the watchers (last in line, CpuLast).
    out["api_cpu"] = cpu_seconds(f.api.proc.pid)
    out["watchers_cpu"] = workers.cpu_seconds() - watchers_cpu
    at = sorted(x - started for r in replies for x in r["at"])
    out["relisted"] = len(at)
    out["deadline"] = deadline
    out["times"] = quantiles(at) | {0.0: at[0]} if at else {}
    after = Reading(f)
    e1 = after.etcd
    out["cache_pod_lists"] = total(after.api, "apiserver_storage_list_total", **BY_NODE_FROM_CACHE)
    out["api_pod_lists"] = total(after.api, "apiserver_request_total", verb="LIST", resource="pods")
    out["consistent_reads"] = total(
        after.api, "apiserver_watch_cache_consistent_read_total", resource="pods"
    )
    out["etcd_pod_lists"] = total(
        after.api, "etcd_requests_total", operation="list", resource="pods"
    )
    out["etcd_pod_requests"] = total(after.api, "etcd_requests_total", resource="pods")
    out["etcd_range_grpc"] = total(e1, "grpc_server_handled_total", grpc_method="Range") - total(
        e0, "grpc_server_handled_total", grpc_method="Range"
    )
    return out


def api_restart_rows(ar) -> list[str]:
    at = ar["times"]
    last = at[1.0] if at else ar["deadline"]
    return [
        f"| API server restart (every watch gets 410): its /readyz and default namespace answer after, s | {ar['ready_s']:.1f} |",
        f"| ... informers relisted within {ar['deadline']:g} s of the restart | {ar['relisted']} |",
        f"| ... each relist after the new API server started (min / p50 / p90 / p99 / max; jitter 0-{NODE_RELIST_JITTER_SECONDS:g} s), s | "
        + (
            f"{at[0.0]:.1f} / {at[0.5]:.1f} / {at[0.9]:.1f} / {at[0.99]:.1f} / {at[1.0]:.1f} |"
            if at
            else "none |"
        ),
        f"| ... pod LISTs served / from the watch cache's spec.nodeName index | {ar['api_pod_lists']:.0f} / {ar['cache_pod_lists']:.0f} |",
        f"| ... consistent reads / the API server's pod lists / all pod requests to etcd (its new watch cache's own list and watch among them) | {ar['consistent_reads']:.0f} / {ar['etcd_pod_lists']:.0f} / {ar['etcd_pod_requests']:.0f} |",
        f"| ... main etcd Range requests from the restart to the last relist | {ar['etcd_range_grpc']:.0f} |",
        f"| ... CPU from the restart to the last relist ({last:.0f} s): the new API server / the watchers, s | {ar['api_cpu']:.1f} / {ar['watchers_cpu']:.1f} |",
    ]


def write(opts, r):
    n = opts.nodes
    per_heap = (r["heap_after"] - r["heap_before"]) * 1024 / n
    per_rss = (r["rss_after"] - r["rss_before"]) * 1024 / n
    per_conn = (r["heap_idle"] - r["heap_before"]) * 1024 / n
    per_bare = (r["heap_bare"] - r["heap_before"]) * 1024 / n
    cpu_quiet = r["quiet"]["api_cpu"] / r["quiet"]["seconds"]
    cpu_open = r["open"]["api_cpu"] / r["open"]["seconds"]
    rs, aq = r["restart"], r["after_quiet"]
    t = r["restart_times"]
    if opts.kwok:
        fleet = (
            f"{version_line(kwok_binary())} playing {n} Nodes (a Lease each, renewed every "
            f"{opts.lease_seconds / 4:g} s) and {r['pods']} pods the scheduler bound "
            f"({opts.pods_per_node} a Node)"
        )
        made = (
            f"| the fleet: Nodes registered / all Ready, s | {r['nodes_created_s']:.0f} / "
            f"{r['nodes_ready_s']:.0f} |",
            f"| the fleet: {r['pods']} pods created, bound and Running, s (pods/s) | "
            f"{r['pods_s']:.0f} ({r['pods'] / r['pods_s']:.0f}) |",
        )
    else:
        fleet = (
            f"{n} Nodes as plain API objects (no kwok, no Leases, no scheduler or "
            f"controller-manager) and {r['pods']} pods created bound by spec.nodeName with a "
            f"Running status ({opts.pods_per_node} a Node)"
        )
        made = (
            f"| the fleet: Nodes registered, s | {r['nodes_created_s']:.0f} |",
            f"| the fleet: {r['pods']} pods created bound and their status written, s "
            f"(pods/s) | {r['pods_s']:.0f} ({r['pods'] / r['pods_s']:.0f}) |",
        )
    g0, g1, gi = r["goroutines_before"], r["goroutines_after"], r["goroutines_idle"]
    lines = [
        f"# Node mode at {n} Nodes: {n} spec.nodeName pod watches on one API server",
        "",
        f"kube-apiserver {version_line(kube_binary('kube-apiserver'))} on etcd "
        f"{etcd_version(CONTROL_PLANE_ETCD)} (events on their own etcd); {fleet}; the watchers: "
        f"{peers.ours()}'s `kube.for_node` informer, one `KubeClient` (one connection) each, "
        f"as threads of {opts.procs} processes"
        + (
            f", in a cpu cgroup of the least weight (cpu.shares {CpuLast.SHARES} against "
            "1,024 for each process outside it), so the control plane's CPU comes first, "
            "as on a cluster where each exporter has its own node's"
            if opts.watchers_last
            else ""
        )
        + ". Machine: 2 cores, 24 GiB, shared (load "
        f"average {r['load_start']:.1f} at start, {r['load_end']:.1f} at end). `python -m "
        f"bench.node_watches --nodes {n} --pods-per-node {opts.pods_per_node} --procs "
        f"{opts.procs} --window {opts.window:g} --in-flight {opts.in_flight}"
        f"{' --kwok' if opts.kwok else ''}{'' if opts.api_restart else ' --no-api-restart'}"
        f"{'' if opts.watchers_last else ' --no-watchers-last'}`.",
        "",
        "| measure | value |",
        "|---|---:|",
        f"| pod watches open in the API server (apiserver_longrunning_requests, WATCH pods) | {r['watches']:.0f} |",
        f"| open ({opts.in_flight * opts.procs} opening at a time): all {r['open_synced']} informers synced, s | {r['open_s']:.1f} |",
        f"| API server Go heap + stacks in use without / with the watches, MiB | {r['heap_before']:.0f} / {r['heap_after']:.0f} |",
        f"| **API server heap + stacks per watch, KiB** | **{per_heap:.1f}** |",
        f"| ... of which goroutine stacks, KiB | {(r['stacks_after'] - r['stacks_before']) * 1024 / n:.1f} |",
        f"| ... of which the TLS connection alone (an idle kept-alive one per Node), KiB | {per_conn:.1f} |",
        f"| the API server's floor: a bare watch of the same selector per Node ({r['bare_watches']:.0f} open), heap + stacks per watch, KiB | {per_bare:.1f} |",
        f"| ... of which goroutine stacks, KiB | {(r['stacks_bare'] - r['stacks_before']) * 1024 / n:.1f} |",
        f"| **ours / the floor** | **{per_heap / per_bare:.2f}x** |",
        f"| API server goroutines with the bare watches (per watch) | {r['goroutines_bare']:.0f} ({(r['goroutines_bare'] - g0) / n:.2f}) |",
        f"| API server RSS per bare watch, KiB | {(r['rss_bare'] - r['rss_before']) * 1024 / n:.1f} |",
        f"| API server goroutines without / with the watches (per watch) / with idle connections (per connection) | "
        f"{g0:.0f} / {g1:.0f} ({(g1 - g0) / n:.2f}) / {gi:.0f} ({(gi - g0) / n:.2f}) |",
        f"| API server RSS without / with, MiB | {r['rss_before']:.0f} / {r['rss_after']:.0f} |",
        f"| API server RSS per watch, KiB | {per_rss:.1f} |",
        f"| API server CPU at rest without / with the watches, cores | {cpu_quiet:.3f} / {cpu_open:.3f} |",
        f"| API server CPU per watch, millicores | {(cpu_open - cpu_quiet) * 1000 / n:.4f} |",
        f"| the watchers' own RSS (all {opts.procs} processes), MiB | {r['workers_rss']:.0f} |",
        *made,
        "| the fleet's RSS before the watchers, MiB | "
        + ", ".join(f"{k} {v:.0f}" for k, v in r["fleet_rss"].items())
        + " |",
        f"| restart of all {r['restart_synced']} at once (all closed, then {opts.in_flight * opts.procs} opening at a time): closed in, s | {r['restart_closed_s']:.1f} |",
        f"| ... all relisted and watching again, s | {rs['seconds']:.1f} |",
        f"| ... each informer synced after (p50 / p90 / p99 / max), s | {t[0.5]:.1f} / {t[0.9]:.1f} / {t[0.99]:.1f} / {t[1.0]:.1f} |",
        f"| pod LISTs the API server served during the restart | {rs['api_pod_lists']:.0f} |",
        f"| ... from its watch cache by the spec.nodeName index (apiserver_storage_list_total) | {rs['cache_pod_lists']:.0f} |",
        f"| ... pods the cache fetched for them / the pods those Nodes hold | {rs['cache_fetched']:.0f} / {r['pods']} |",
        f"| ... consistent reads (apiserver_watch_cache_consistent_read_total, pods) | {rs['consistent_reads']:.0f} |",
        f"| the API server's pod requests to etcd: lists / all (etcd_requests_total, pods) | {rs['etcd_pod_lists']:.0f} / {rs['etcd_pod_requests']:.0f} |",
        f"| main etcd Range requests during the restart / the same time quiet after | {rs['etcd_range_grpc']:.0f} / {aq['etcd_range_grpc']:.0f} |",
        f"| main etcd mvcc ranges during the restart / quiet | {rs['etcd_range_mvcc']:.0f} / {aq['etcd_range_mvcc']:.0f} |",
        f"| main etcd CPU during the restart / quiet, s | {rs['etcd_cpu']:.2f} / {aq['etcd_cpu']:.2f} |",
        f"| API server CPU during the restart, s | {rs['api_cpu']:.1f} |",
    ]
    if "api_restart" in r:
        lines += api_restart_rows(r["api_restart"])
    if "api_restart_failed" in r:
        lines.append(f"| API server restart | failed: {r['api_restart_failed']} |")
    lines += opts.notes
    peers.report(pathlib.Path(opts.results), lines)
    return per_heap


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        with open(sys.argv[3]) as f:
            worker(sys.argv[2], json.load(f), int(sys.argv[4]))
        return
    # A SIGTERM (timeout) unwinds like an exception: the fleet is stopped by its `finally`.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=7500)
    p.add_argument("--pods-per-node", type=int, default=1)
    p.add_argument("--procs", type=int, default=6)
    p.add_argument("--window", type=float, default=60.0)
    p.add_argument("--pods-timeout", type=float, default=900.0)
    p.add_argument("--lease-seconds", type=int, default=40)
    p.add_argument(
        "--in-flight",
        type=int,
        default=50,
        help="informers each worker process has opening (not yet synced) at a time",
    )
    p.add_argument(
        "--api-restart",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="end with an API server restart (every watch gets 410 and relists)",
    )
    p.add_argument(
        "--relist-deadline",
        type=float,
        default=600.0,
        help="after the API server restart, seconds to wait for every informer's relist",
    )
    p.add_argument(
        "--watchers-last",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the watchers in a cpu cgroup of the least weight (CpuLast)",
    )
    p.add_argument("--results", default=str(RESULTS), help="where the report goes")
    p.add_argument(
        "--kwok",
        action="store_true",
        help="the full fleet (kwok Nodes renewing Leases, the scheduler, the "
        "controller-manager) instead of API objects alone",
    )
    opts = p.parse_args()
    opts.notes = []
    result = run(opts)
    print(json.dumps(result, default=str), flush=True)
    write(opts, result)


if __name__ == "__main__":
    main()
