"""The cluster-mode exporter on a kwok fleet, beside kube-state-metrics on the same cluster.

    flock /var/lock/kse-bigrun.lock python -m bench.cluster_scale [--nodes 2000] [--pods 20000]
        [--rollout 10000] [--event-rate 500] [--event-seconds 300] [--rest 60] [--scrapes 200]
    flock /var/lock/kse-bigrun.lock python -m bench.fleet --sizes 7500:150000 --bind direct \
        --cluster-scale "--rest 60 --scrapes 20 --rollout 0 --event-seconds 0 --no-relist"

One fleet (testbed/fleet.py: the 1.37 API server on a main and an events etcd 3.7,
scheduler, controller-manager, kwok Nodes and pods; or, through bench.fleet's
--cluster-scale, the fleet that bench measured, `run_on`), then, in one run:

1. at rest with nothing watching: the API server's CPU, memory and bytes written;
2. the exporter as the Deployment runs it (deploy/base/cluster.yaml with the balloon,
   imagepull-events and etcd components: balloon pods by run=overprovisioning, every Node,
   PriorityClasses, Pulled and Failed events, both etcd clusters): the time to its first
   complete scrape (every collector succeeding) and what the API server spent on it
   until then (CPU, bytes written: its lists), then `--rest` seconds at rest;
3. the same, one after the other, for the same exporter with a balloon selector that
   matches every fleet pod (it watches the same pods and nodes as kube-state-metrics
   does), kube-state-metrics with its defaults, and with --resources=pods,nodes: each
   window at rest has one more of them than the last, so the API server's CPU and bytes
   each adds is the difference of two windows;
4. CPU per scrape: each of the four in turn takes `--scrapes` sequential scrapes over one
   kept-alive connection (bench/scraping.py, as the node benches measure it) while the
   others rest; its CPU over them per scrape, and the same less what it used at rest over
   as long (its watches' own work);
5. churn (unless `--rollout 0`): a rollout that replaces at least `--rollout` pods, whole
   Deployments (a template change);
6. (unless `--event-seconds 0`) `--event-rate` image-pull events a second for
   `--event-seconds`, written through the API server as events.k8s.io/v1 Events the way
   kubelet reports a pull (Pulling, then Pulled or Failed): the exporter's counters are
   compared with what was sent;
7. (unless `--no-relist`) a relist: what listing the exporter's caches again costs (after
   a 410), in this process with the collectors' own field projections.

CPU is per minute of each phase (user + system from /proc), bytes read and written from
/proc/PID/io (the watch and list traffic), RSS at the end of each phase and at most.
Writes bench/results/cluster_scale.md (or --out), with the versions that ran.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from bench import peers
from bench.scraping import scrape_process
from kube_scale_exporter import kube
from kube_scale_exporter.collectors.balloon.collector import POD_FIELDS
from kube_scale_exporter.collectors.imagepull_events import EVENT_FIELDS, event_summary
from testbed.builds import (
    CONTROL_PLANE_ETCD,
    etcd_version,
    kube_binary,
    kube_state_metrics_binary,
    kwok_binary,
    version_line,
)
from testbed.exporter import start_exporter
from testbed.fleet import BALLOON_LABELS, NAMESPACE, Fleet, FleetSize
from testbed.kube_apiserver import Api
from testbed.metrics import parse_exposition
from testbed.ports import free_port
from testbed.procs import Proc, cpu_seconds, rss_mib, wait_for_port

RESULTS = peers.ROOT / "bench" / "results" / "cluster_scale.md"
BALLOONS = 20
# Room for every pod in the every-pod exporter's balloon cache (its default cap is 20,000,
# past which the collector fails by design: docs/balloon.md).
EVERY_POD_CAP = 1_000_000
# A pull kubelet reports: Pulling, then Pulled (or Failed, one in FAILED_EVERY).
FAILED_EVERY = 10
PULLED_NOTE = (
    'Successfully pulled image "registry.example.com/team/app-{i}:v2" in 1.5s '
    "(4.25s including waiting). Image size: 52428800 bytes."
)
FAILED_NOTE = (
    'Failed to pull image "docker.io/library/app-{i}:v2": rpc error: code = Unknown desc = '
    'failed to pull and unpack image "docker.io/library/app-{i}:v2": failed to resolve '
    'reference "docker.io/library/app-{i}:v2": unexpected status from HEAD request to '
    "https://registry-1.docker.io/v2/library/app-{i}/manifests/v2: 429 Too Many Requests"
)


# ---- the processes measured ---------------------------------------------------------------
class Watched:
    """A process whose CPU, RSS and bytes read are read per phase."""

    def __init__(self, name, proc):
        self.name, self.proc = name, proc
        self.phases = {}
        self._mark = None

    def _read(self):
        with open(f"/proc/{self.proc.pid}/io") as f:
            io = dict(line.split(": ") for line in f.read().splitlines())
        return time.monotonic(), cpu_seconds(self.proc.pid), int(io["rchar"]), int(io["wchar"])

    def begin(self):
        self._mark = self._read()

    def end(self, phase):
        (t0, c0, r0, w0), (t1, c1, r1, w1) = self._mark, self._read()
        rss, peak = rss_mib(self.proc.pid)
        minutes = (t1 - t0) / 60
        self.phases[phase] = {
            "cpu_s_per_min": (c1 - c0) / minutes,
            "cpu_s": c1 - c0,
            "rss_mib": rss,
            "peak_mib": peak,
            "read_mib_per_min": (r1 - r0) / 2**20 / minutes,
            "written_mib": (w1 - w0) / 2**20,
            "written_mib_per_min": (w1 - w0) / 2**20 / minutes,
            "seconds": t1 - t0,
        }


def scrape(url):
    return parse_exposition(requests.get(url + "/metrics", timeout=60).text)


def value(families, name, **labels):
    total = None
    for f in families:
        for s in f.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total = (total or 0) + s.value
    return total


def ours_complete(url):
    families = scrape(url)
    ok = [
        s.value
        for f in families
        for s in f.samples
        if s.name == "kubescale_scrape_collector_success"
    ]
    return bool(ok) and all(v == 1 for v in ok)


def count_lines(url, prefixes):
    """How many lines of a scrape start with each of `prefixes` (bytes), counted as the
    body streams in: at 100,000 pods kube-state-metrics answers with hundreds of MiB,
    more than parsing it here would take."""
    found = dict.fromkeys(prefixes, 0)
    tail = b""
    with requests.get(url + "/metrics", timeout=120, stream=True) as reply:
        reply.raise_for_status()
        for chunk in reply.iter_content(1 << 20):
            block = tail + chunk
            cut = block.rfind(b"\n") + 1  # whole lines now, the rest with the next chunk
            for prefix in prefixes:
                found[prefix] += block.count(b"\n" + prefix, 0, cut)
            tail = block[cut - 1 :] if cut else block
    return found


def ksm_complete(url, pods, nodes):
    # Every line but the first follows a newline; kube_pod_info is never the first.
    found = count_lines(url, (b"kube_pod_info{", b"kube_node_info{"))
    return found[b"kube_pod_info{"] >= pods and found[b"kube_node_info{"] >= nodes


def time_to_complete(check, started, timeout=600):
    while time.monotonic() - started < timeout:
        try:
            if check():
                return time.monotonic() - started
        except (requests.RequestException, OSError):
            pass
        time.sleep(0.5)
    raise TimeoutError("no complete scrape")


def start_ours(fleet, workdir, selector, *extra):
    flags = [
        "--mode=cluster",
        "--collector.disable-defaults",
        "--collector.balloon",
        f"--balloon.selector={selector}",
        *extra,
        "--collector.imagepull_events",
        "--collector.etcd",
        f"--etcd.cluster=main={fleet.main_etcd.client_url}",
        f"--etcd.cluster=events={fleet.events_etcd.client_url}",
        f"--kube.kubeconfig={fleet.kubeconfig}",
    ]
    started = time.monotonic()
    exporter = start_exporter(flags, workdir, timeout=60)
    return exporter.proc, exporter.url, started


def start_ksm(fleet, workdir, name, extra):
    port, telemetry = free_port(), free_port()
    started = time.monotonic()
    proc = Proc(
        [
            kube_state_metrics_binary(),
            f"--kubeconfig={fleet.kubeconfig}",
            "--host=127.0.0.1",
            f"--port={port}",
            "--telemetry-host=127.0.0.1",
            f"--telemetry-port={telemetry}",
            *extra,
        ],
        Path(workdir) / f"{name}.log",
    )
    wait_for_port(port, timeout=60, proc=proc)
    return proc, f"http://127.0.0.1:{port}", started


# ---- the load ------------------------------------------------------------------------------
def make_balloons(fleet):
    fleet.admin.create(
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"metadata": {"name": "overprovisioning"}, "value": -1, "globalDefault": False},
    )
    labels = {"run": "overprovisioning"}
    fleet.admin.create(
        f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments",
        {
            "metadata": {"name": "overprovisioning"},
            "spec": {
                "replicas": BALLOONS,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "priorityClassName": "overprovisioning",
                        "nodeSelector": {"kse.test/node-pool": "cpu"},
                        "terminationGracePeriodSeconds": 0,
                        "containers": [
                            {
                                "name": "pause",
                                "image": "registry.k8s.io/pause:3.10",
                                "resources": {"requests": {"cpu": "4", "memory": "8Gi"}},
                            }
                        ],
                    },
                },
            },
        },
    )


def rollout(fleet, pods, stamp):
    """A template change on Deployments holding `pods` pods in all; returns their names."""
    chosen, total = [], 0
    for name, replicas in sorted(fleet.deployments.items()):
        if name.startswith("app-") and total < pods:
            chosen.append(name)
            total += replicas
    for name in chosen:
        fleet.admin.merge_patch(
            f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}",
            {"spec": {"template": {"metadata": {"annotations": {"kse.test/rollout": stamp}}}}},
        )
    return chosen, total


def rollout_done(fleet, names):
    for name in names:
        d = fleet.admin.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}")
        st, want = d.get("status", {}), d["spec"]["replicas"]
        if d["metadata"]["generation"] != st.get("observedGeneration"):
            return False
        # Every pod replaced; readyReplicas is not waited for: under this machine's load
        # the ReplicaSet controller's ready count lagged minutes behind pods Running and
        # Ready (seen in the first 500-node run).
        if st.get("updatedReplicas") != want or st.get("replicas") != want:
            return False
    return True


def micro_time():
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def pull_event(i, reason, node):
    pod = f"puller-{i:07d}"
    note = {
        "Pulling": f'Pulling image "registry.example.com/team/app-{i % 97}:v2"',
        "Pulled": PULLED_NOTE.format(i=i % 97),
        "Failed": FAILED_NOTE.format(i=i % 97),
    }[reason]
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{pod}.{reason.lower()}", "namespace": NAMESPACE},
        "eventTime": micro_time(),
        "reportingController": "kubelet",
        "reportingInstance": node,
        "action": reason,
        "reason": reason,
        "type": "Warning" if reason == "Failed" else "Normal",
        "note": note,
        "regarding": {
            "kind": "Pod",
            "namespace": NAMESPACE,
            "name": pod,
            "apiVersion": "v1",
            "fieldPath": "spec.containers{app}",
        },
    }


def send_events(fleet, rate, seconds, writers=24):
    """`rate` events a second for `seconds`: pulls of Pulling then Pulled/Failed. Returns
    the counts sent by reason and the achieved rate."""
    sent = {"Pulling": 0, "Pulled": 0, "Failed": 0}
    lock = threading.Lock()
    local = threading.local()
    pulls = int(rate * seconds / 2)
    start = time.monotonic()
    errors = []

    def api():
        if getattr(local, "api", None) is None:
            local.api = Api(fleet.api.server, fleet.api.ca, fleet.api.admin_token)
        return local.api

    def one_pull(i):
        # Pull i is due at start + 2i/rate: its two events keep the rate.
        delay = start + 2 * i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        node = fleet.nodes[i % len(fleet.nodes)]
        path = f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events"
        outcome = "Failed" if i % FAILED_EVERY == 0 else "Pulled"
        try:
            for reason in ("Pulling", outcome):
                api().create(path, pull_event(i, reason, node))
                with lock:
                    sent[reason] += 1
        except Exception as exc:  # noqa: BLE001  (counted: what was not sent is not compared)
            errors.append(repr(exc)[:200])

    with ThreadPoolExecutor(writers) as pool:
        list(pool.map(one_pull, range(pulls)))
    elapsed = time.monotonic() - start
    return sent, sum(sent.values()) / elapsed, elapsed, errors


def pull_counts(url):
    families = scrape(url)
    return {
        "Pulled": value(families, "kubescale_image_pull_duration_seconds_count") or 0,
        "succeeded": value(families, "kubescale_image_pulls_succeeded_total") or 0,
        "Failed": value(families, "kubescale_image_pull_failures_total") or 0,
    }


def scrape_costs(servers, scrapes, rest_phase):
    """Each server's CPU per scrape, one server at a time; `rest_phase` gives the CPU per
    minute each used at rest, taken off as its watches' work over the same time."""
    out = {}
    for w in servers:
        started = time.monotonic()
        run = scrape_process(w.proc.pid, w.url + "/metrics", scrapes)
        at_rest = w.phases[rest_phase]["cpu_s_per_min"] * (time.monotonic() - started) / 60
        out[w.name] = {
            "cpu_ms": run.cpu_ms_per_scrape,
            "net_cpu_ms": (run.cpu_s - at_rest) * 1000 / scrapes,
            "wall_p50_ms": run.wall_p50_ms,
            "samples": run.samples,
            "seconds": time.monotonic() - started,
        }
    return out


def relist_cost(fleet):
    """CPU and wall time of listing again what the exporter caches, in this process, with
    the collectors' projections; and the caches' sizes."""
    client = kube.KubeClient(kube.load(fleet.kubeconfig))
    events = kube.Resource("/api/v1", "events")
    cases = {
        "nodes": (kube.NODES, kube.NODE_SHAPE, {}),
        "Pulled events": (
            events,
            EVENT_FIELDS.then(event_summary),
            {"field_selector": "reason=Pulled"},
        ),
        "every pod (balloon projection)": (kube.PODS, POD_FIELDS, {}),
    }
    out = {}
    for name, (resource, transform, kw) in cases.items():
        inf = kube.Informer(client, resource, transform=transform, **kw)
        wall, cpu = time.monotonic(), time.process_time()
        inf.start()
        assert inf.wait_synced(600)
        out[name] = {
            "objects": len(inf.items()),
            "wall_s": time.monotonic() - wall,
            "cpu_s": time.process_time() - cpu,
        }
        inf.stop()
    client.close()
    return out


# ---- the run ------------------------------------------------------------------------------
def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--gpu-nodes", type=int, default=100)
    ap.add_argument("--pods", type=int, default=20000)
    ap.add_argument("--rollout", type=int, default=10000, help="pods to replace; 0: no rollout")
    ap.add_argument("--event-rate", type=float, default=500)
    ap.add_argument("--event-seconds", type=float, default=300, help="0: no image-pull events")
    ap.add_argument("--rest", type=float, default=60)
    ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--relist", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--out", default=str(RESULTS))
    return ap


class Log(list):
    def __call__(self, text):
        line = f"{time.strftime('%H:%M:%S')} {text}"
        print(line, flush=True)
        self.append(line)


def main():
    opts = parser().parse_args()
    say = Log()
    size = FleetSize(
        nodes=opts.nodes, gpu_nodes=opts.gpu_nodes, pods=opts.pods, gpu_pods=opts.gpu_nodes
    )
    with tempfile.TemporaryDirectory(prefix="bench-cluster-scale-") as tmp:
        fleet = Fleet(Path(tmp) / "fleet", size).start()
        try:
            t = time.monotonic()
            fleet.create_nodes()
            fleet.wait_nodes_ready()
            say(f"{opts.nodes} nodes Ready in {time.monotonic() - t:.0f}s")
            t = time.monotonic()
            fleet.create_workload()
            make_balloons(fleet)
            fleet.wait_pods_running(progress=None)
            total_pods = opts.pods + opts.gpu_nodes + BALLOONS
            say(f"{total_pods} pods Running in {time.monotonic() - t:.0f}s")
            time.sleep(opts.rest)  # the controllers' and kwok's last writes settle first
            opts.fleet = (
                f"{opts.nodes} Nodes ({opts.gpu_nodes} GPU), {total_pods} pods from "
                "Deployments the scheduler bound and kwok played Running"
            )
            opts.command = (
                f"python -m bench.cluster_scale --nodes {opts.nodes} --gpu-nodes "
                f"{opts.gpu_nodes} --pods {opts.pods} --rollout {opts.rollout} --event-rate "
                f"{opts.event_rate:g} --event-seconds {opts.event_seconds:g} --rest "
                f"{opts.rest:g} --scrapes {opts.scrapes}"
            )
            r = measure(fleet, opts, tmp, total_pods, say)
        finally:
            fleet.stop()
    write(opts, r)


def run_on(fleet, argv, total_pods, fleet_opts):
    """The measurements on a fleet bench.fleet brought up (its --cluster-scale ARGS),
    before it stops it; the fleet's size and how its pods were made come from there."""
    opts = parser().parse_args(argv)
    opts.nodes = fleet.size.nodes
    opts.gpu_nodes = fleet.size.gpu_nodes
    opts.fleet = (
        f"{opts.nodes} Nodes ({opts.gpu_nodes} GPU) with Leases of "
        f"{fleet.size.lease_seconds} s, {total_pods} pods "
        + (
            "bound directly (spec.nodeName, the Running status a kubelet reports; no "
            "scheduler binding), balloons run=overprovisioning among them"
            if fleet_opts.bind == "direct"
            else "from Deployments the scheduler bound and kwok played Running"
        )
        + " (bench/results/fleet.md)"
    )
    opts.command = (
        f"python -m bench.fleet --sizes {fleet_opts.sizes} --bind {fleet_opts.bind} "
        f"--lease-seconds {fleet_opts.lease_seconds} --pods-timeout "
        f'{fleet_opts.pods_timeout:g} --rest {fleet_opts.rest:g} --cluster-scale "{" ".join(argv)}"'
    )
    say = Log()
    with tempfile.TemporaryDirectory(prefix="bench-cluster-scale-") as tmp:
        r = measure(fleet, opts, tmp, total_pods, say)
    write(opts, r)


def measure(fleet, opts, tmp, total_pods, say) -> dict:
    """Steps 1-7 of the module docstring on a running fleet; the figures for `write`."""
    r = {"total_pods": total_pods, "log": say, "load_start": os.getloadavg()}
    watched = {}
    try:
        api = watched["kube-apiserver"] = Watched("kube-apiserver", fleet.api.proc)

        def rest(phase):
            for w in watched.values():
                w.begin()
            time.sleep(opts.rest)
            for w in watched.values():
                w.end(phase)
            say(f"{phase}: " + json.dumps({n: w.phases[phase] for n, w in watched.items()}))

        rest("rest, nothing watching")
        first = r["first"] = {}
        starting = r["starting"] = {}
        servers = (
            ("exporter (deploy)", lambda: start_ours(fleet, tmp, "run=overprovisioning")),
            (
                "exporter (every pod)",
                lambda: start_ours(
                    fleet, tmp, "app", f"--balloon.max-cached-objects={EVERY_POD_CAP}"
                ),
            ),
            ("ksm (defaults)", lambda: start_ksm(fleet, tmp, "ksm-defaults", [])),
            (
                "ksm (pods,nodes)",
                lambda: start_ksm(fleet, tmp, "ksm-pods-nodes", ["--resources=pods,nodes"]),
            ),
        )
        every_pod = total_pods - count_balloons(fleet)
        for name, start in servers:
            api.begin()
            proc, url, started = start()
            check = (
                (lambda u=url: ours_complete(u))
                if name.startswith("exporter")
                else (lambda u=url: ksm_complete(u, total_pods, opts.nodes))
            )
            first[name] = time_to_complete(check, started)
            api.end(f"start, {name}")
            starting[name] = api.phases[f"start, {name}"]
            watched[name] = Watched(name, proc)
            watched[name].url = url
            say(f"{name}: first complete scrape after {first[name]:.1f}s")
            rest(f"rest, + {name}")
        r["every_pod_pods"] = every_pod
        scrapes = r["scrapes"] = scrape_costs(
            [watched[n] for n in first], opts.scrapes, "rest, + ksm (pods,nodes)"
        )
        say(f"{opts.scrapes} scrapes each: {json.dumps(scrapes)}")

        if opts.rollout:
            for w in watched.values():
                w.begin()
            t = time.monotonic()
            names, replaced = rollout(fleet, opts.rollout, str(time.time()))
            while not rollout_done(fleet, names):
                fleet.check_alive()
                if time.monotonic() - t > 1800:
                    raise TimeoutError("rollout")
                time.sleep(2)
            r["rollout"] = {"pods": replaced, "seconds": time.monotonic() - t}
            for w in watched.values():
                w.end("rollout")
            say(f"rollout of {replaced} pods in {r['rollout']['seconds']:.0f}s")

        if opts.event_seconds:
            r["events"] = pull_events_phase(fleet, opts, watched, say)
        if opts.relist:
            r["relist"] = relist_cost(fleet)
            say(f"relist: {r['relist']}")
        r["apiserver_rss"] = rss_mib(api.proc.pid)
        r["load_end"] = os.getloadavg()
    finally:
        for w in watched.values():
            if w.name != "kube-apiserver":
                w.proc.stop()
    r["phases"] = {n: w.phases for n, w in watched.items()}
    return r


def count_balloons(fleet) -> int:
    selector = ",".join(f"{k}={v}" for k, v in BALLOON_LABELS.items())
    return len(fleet.admin.get("/api/v1/pods", labelSelector=selector)["items"])


def pull_events_phase(fleet, opts, watched, say) -> dict:
    """Step 6: the events sent, what the two exporters counted, and how long after."""
    ours = watched["exporter (deploy)"]
    before = pull_counts(ours.url)
    for w in watched.values():
        w.begin()
    sent, rate, sent_s, errors = send_events(fleet, opts.event_rate, opts.event_seconds)
    for w in watched.values():
        w.end("image-pull events")
    say(f"sent {sent} in {sent_s:.0f}s ({rate:.0f}/s), {len(errors)} errors")
    t = time.monotonic()
    want = {
        "Pulled": before["Pulled"] + sent["Pulled"],
        "Failed": before["Failed"] + sent["Failed"],
    }
    counted = pull_counts(ours.url)
    while (counted["Pulled"], counted["Failed"]) != (want["Pulled"], want["Failed"]):
        if time.monotonic() - t > 120:
            break
        time.sleep(1)
        counted = pull_counts(ours.url)
    lag = time.monotonic() - t
    other = pull_counts(watched["exporter (every pod)"].url)
    say(f"counted {counted} (every-pod exporter {other}) {lag:.1f}s after the last send")
    return {
        "sent": sent,
        "rate": rate,
        "seconds": sent_s,
        "errors": errors[:5],
        "error_count": len(errors),
        "before": before,
        "counted": counted,
        "every_pod_exporter": other,
        "lag_s": lag,
    }


def ratio(a, b):
    return f"{a / b:.2f}x" if b else "(ours 0 in the window)"


def ksm_version():
    out = subprocess.run(
        [kube_state_metrics_binary(), "version"], capture_output=True, text=True, check=True
    )
    return out.stdout.splitlines()[0]


def cells(values, spec):
    return " | ".join(format(v, spec) for v in values)


def write(opts, r):
    out = Path(opts.out)
    out.with_suffix(".json").write_text(json.dumps(r, indent=1) + "\n")
    phases = r["phases"]
    procs = list(r["first"])  # the four servers, in the order they were started
    at_rest = f"rest, + {procs[-1]}"  # the window with all four
    lines = [
        f"# Cluster mode at {opts.nodes} nodes and {r['total_pods']} pods, beside kube-state-metrics",
        "",
        f"kwok fleet (testbed/fleet.py): {version_line(kube_binary('kube-apiserver'))} on a main and "
        f"an events etcd {etcd_version(CONTROL_PLANE_ETCD).removeprefix('v')}, scheduler, "
        f"controller-manager, kwok {version_line(kwok_binary())}; {opts.fleet}; "
        f"{ksm_version()}; ours: {peers.ours()}; machine: 2 cores, 24 GiB, shared with other "
        "sessions (load averages, 1/5/15 min, "
        + " / ".join(f"{x:.1f}" for x in r["load_start"])
        + " at the start, "
        + " / ".join(f"{x:.1f}" for x in r["load_end"])
        + f" at the end). `{opts.command}`; raw figures in {out.with_suffix('.json').name}.",
        "",
        "What each watches: *exporter (deploy)* is deploy/base/cluster.yaml with the balloon,",
        "imagepull-events and etcd components (balloon pods by run=overprovisioning, every",
        "Node, PriorityClasses, Pulled and Failed events; both etcd clusters); *exporter (every",
        "pod)* the same with --balloon.selector=app, which every fleet pod but the balloons",
        f"matches ({r['every_pod_pods']} pods; --balloon.max-cached-objects={EVERY_POD_CAP}):",
        "the same pods and nodes as *ksm (pods,nodes)* (`--resources=pods,nodes`); *ksm",
        "(defaults)* every resource kube-state-metrics watches by default.",
        "",
        "## At rest" + (" and under churn" if "rollout" in r or "events" in r else ""),
        "",
        "| | " + " | ".join(procs) + " |",
        "|---|" + "---:|" * len(procs),
        "| first complete scrape after start, s | "
        + cells((r["first"][p] for p in procs), ".1f")
        + " |",
    ]
    shown = [(at_rest, "at rest")]
    if "rollout" in r:
        ro = r["rollout"]
        shown.append(("rollout", f"{ro['pods']}-pod rollout ({ro['seconds']:.0f} s)"))
    if "events" in r:
        shown.append(("image-pull events", f"image-pull events ({r['events']['rate']:.0f}/s)"))
    for phase, label in shown:
        for key, unit in (
            ("cpu_s_per_min", "CPU s per minute"),
            ("rss_mib", "RSS at its end, MiB"),
            ("read_mib_per_min", "bytes read, MiB per minute"),
        ):
            lines.append(
                f"| {label}: {unit} | "
                + cells((phases[p][phase][key] for p in procs), ".2f")
                + " |"
            )
    peak = [max(ph["peak_mib"] for ph in phases[p].values()) for p in procs]
    lines.append("| peak RSS over the run, MiB | " + cells(peak, ".1f") + " |")
    d, e = phases["exporter (deploy)"], phases["exporter (every pod)"]
    k, kd = phases["ksm (pods,nodes)"], phases["ksm (defaults)"]
    lines += [
        "",
        "Ratios (ksm / ours, same pods and nodes: *ksm (pods,nodes)* / *exporter (every pod)*; "
        "and the Deployment's exporter against ksm's defaults):",
        "",
        "| | ksm (pods,nodes) / exporter (every pod) | ksm (defaults) / exporter (deploy) |",
        "|---|---:|---:|",
    ]
    for phase, label in [(at_rest, "rest, all four")] + [(p, p) for p, _ in shown[1:]]:
        for key in ("rss_mib", "cpu_s_per_min"):
            lines.append(
                f"| {label}: {key} | {ratio(k[phase][key], e[phase][key])} "
                f"| {ratio(kd[phase][key], d[phase][key])} |"
            )
    sc = r["scrapes"]
    lines += [
        "",
        "## CPU per scrape",
        "",
        f"Each in turn, {opts.scrapes} sequential scrapes over one kept-alive connection while "
        "the others rested; *net* takes off what the same process used at rest over as long "
        "(its watches' work, from the at-rest window above).",
        "",
        "| | " + " | ".join(procs) + " |",
        "|---|" + "---:|" * len(procs),
        "| CPU ms per scrape | " + cells((sc[p]["cpu_ms"] for p in procs), ".2f") + " |",
        "| net CPU ms per scrape | " + cells((sc[p]["net_cpu_ms"] for p in procs), ".2f") + " |",
        "| scrape p50, ms | " + cells((sc[p]["wall_p50_ms"] for p in procs), ".1f") + " |",
        "| samples | " + cells((sc[p]["samples"] for p in procs), ",") + " |",
        "",
        "Ratios of CPU per scrape: ksm (pods,nodes) / exporter (every pod) "
        f"{ratio(sc['ksm (pods,nodes)']['cpu_ms'], sc['exporter (every pod)']['cpu_ms'])}, "
        "ksm (defaults) / exporter (deploy) "
        f"{ratio(sc['ksm (defaults)']['cpu_ms'], sc['exporter (deploy)']['cpu_ms'])}.",
        "",
        *targets(phases, sc, at_rest),
    ]
    a = phases["kube-apiserver"]
    lines += [
        "",
        "## The API server, as each one was added",
        "",
        f"Each row a {opts.rest:g}-s window at rest with one more watcher than the row above; "
        "*added* is the difference from the row above (two windows on a shared machine: "
        "noise of the same order as a small difference). *Its start* is from starting it to "
        "its first complete scrape: the lists (or streaming lists) that fill its caches.",
        "",
        "| kube-apiserver | CPU s per minute | added | MiB written per minute | added | RSS, MiB "
        "| its start: API server CPU s | its start: MiB written |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    before = a["rest, nothing watching"]
    lines.append(
        f"| at rest, nothing watching | {before['cpu_s_per_min']:.2f} | | "
        f"{before['written_mib_per_min']:.2f} | | {before['rss_mib']:.0f} | | |"
    )
    for p in procs:
        now, start = a[f"rest, + {p}"], r["starting"][p]
        lines.append(
            f"| at rest, + {p} | {now['cpu_s_per_min']:.2f} | "
            f"{now['cpu_s_per_min'] - before['cpu_s_per_min']:+.2f} | "
            f"{now['written_mib_per_min']:.2f} | "
            f"{now['written_mib_per_min'] - before['written_mib_per_min']:+.2f} | "
            f"{now['rss_mib']:.0f} | {start['cpu_s']:.1f} | {start['written_mib']:.0f} |"
        )
        before = now
    for phase in ("rollout", "image-pull events"):
        if phase in a:
            lines.append(
                f"| {phase} | {a[phase]['cpu_s_per_min']:.2f} | | "
                f"{a[phase]['written_mib_per_min']:.2f} | | {a[phase]['rss_mib']:.0f} | | |"
            )
    if "events" in r:
        ev = r["events"]
        lines += [
            "",
            "## Image-pull events",
            "",
            f"Sent through the API server (events.k8s.io/v1): {ev['sent']} in {ev['seconds']:.0f} s, "
            f"{ev['rate']:.0f} events/s ({ev['error_count']} requests failed: not counted as sent).",
            "",
            "| | sent | counted by the exporter (deploy) | counted by the exporter (every pod) |",
            "|---|---:|---:|---:|",
            f"| Pulled | {ev['sent']['Pulled']} | {ev['counted']['Pulled'] - ev['before']['Pulled']:.0f} "
            f"| {ev['every_pod_exporter']['Pulled']:.0f} |",
            f"| Failed | {ev['sent']['Failed']} | {ev['counted']['Failed'] - ev['before']['Failed']:.0f} "
            f"| {ev['every_pod_exporter']['Failed']:.0f} |",
            "",
            f"The counts were final {ev['lag_s']:.1f} s after the last event was sent.",
        ]
    if "relist" in r:
        lines += [
            "",
            "## A relist (after a 410), with the collectors' projections",
            "",
            "| cache | objects | wall s | CPU s |",
            "|---|---:|---:|---:|",
        ]
        for name, c in r["relist"].items():
            lines.append(f"| {name} | {c['objects']} | {c['wall_s']:.2f} | {c['cpu_s']:.2f} |")
    lines += ["", "## Log", "", "```", *r["log"], "```"]
    peers.report(out, lines)


def targets(phases, sc, at_rest) -> list[str]:
    """Issue 40's targets: our RSS at most a third of kube-state-metrics' on the same
    objects, and less CPU on every row (at rest and per scrape, both pairs)."""
    pairs = (("exporter (every pod)", "ksm (pods,nodes)"), ("exporter (deploy)", "ksm (defaults)"))
    rows = []
    for ours, theirs in pairs:
        o, t = phases[ours][at_rest], phases[theirs][at_rest]
        rss = o["rss_mib"] <= t["rss_mib"] / 3
        cpu = o["cpu_s_per_min"] < t["cpu_s_per_min"] and sc[ours]["cpu_ms"] < sc[theirs]["cpu_ms"]
        rows.append(
            f"- {ours} against {theirs}: RSS {o['rss_mib']:.1f} against {t['rss_mib']:.1f} MiB "
            f"(a third or less: {'met' if rss else 'missed'}); less CPU at rest and per scrape: "
            f"{'met' if cpu else 'missed'}."
        )
    return ["Targets (issue 40):", "", *rows]


if __name__ == "__main__":
    main()
