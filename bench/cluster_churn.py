"""The running cluster-mode exporter through a 10,000-pod rollout, then through a 410.

    flock /var/lock/kse-bigrun.lock python -m bench.cluster_churn [--nodes 1000]
        [--pods 10000] [--event-rate 200] [--event-seconds 60]

One kwok fleet (testbed/fleet.py) and two cluster-mode exporters as bench/cluster_scale.py
starts them: *deploy* (deploy/base/cluster.yaml's collectors: balloons by
run=overprovisioning, which no fleet pod is, every Node, PriorityClasses, Pulled and
Failed events, both etcd clusters) and *every pod* (the same with --balloon.selector=app,
which every fleet pod matches: every pod in its cache). Then:

1. a rollout: a template change on every Deployment, `--pods` pods replaced, the exporters
   watching: each one's CPU, RSS (sampled, its peak within the phase), the relists it
   made (none expected: a watch that keeps up never relists), and how long after the
   rollout ended its view was whole (every pod Running, none of the old ones left);
2. a 410: both exporters stopped (SIGSTOP, as a node starved of CPU stops a pod) while a
   second rollout replaces every pod and `--event-rate` image-pull events a second are
   sent for `--event-seconds`; etcd compacted and the API server restarted (its new watch
   cache starts past the exporters' resourceVersions, as after an upgrade); the exporters
   resumed. Their watches get 410 Gone and relist: the relists by resource, the time from
   the resume until the view is whole again, the RSS peak, and what was dropped: the pulls
   counted against the pulls sent while they were stopped, and the pods against the API's.

CPU from /proc (user + system), RSS sampled every 0.25 s. Writes
bench/results/cluster_churn.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import threading
import time

from bench import peers
from bench.cluster_scale import (
    pull_counts,
    rollout,
    rollout_done,
    scrape,
    send_events,
    start_ours,
    value,
)
from testbed.builds import kube_binary, kwok_binary, version_line
from testbed.fleet import NAMESPACE, Fleet, FleetSize
from testbed.kube_apiserver import etcd_compact
from testbed.procs import cpu_seconds, rss_mib

RESULTS = peers.ROOT / "bench" / "results" / "cluster_churn.md"
EXPORTERS = {"deploy": "run=overprovisioning", "every pod": "app"}
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


class Sampled:
    """A process's CPU over a phase and its RSS sampled through it."""

    def __init__(self, proc):
        self.proc = proc
        self._stop = threading.Event()
        self.peak = 0.0

    def __enter__(self):
        self.t0, self.cpu0 = time.monotonic(), cpu_seconds(self.proc.pid)
        self._stop.clear()
        self.peak = rss_mib(self.proc.pid)[0]
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.25):
            self.peak = max(self.peak, rss_mib(self.proc.pid)[0])

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.cpu_s = cpu_seconds(self.proc.pid) - self.cpu0
        self.seconds = time.monotonic() - self.t0
        self.rss_end = rss_mib(self.proc.pid)[0]


def relists(url) -> dict:
    families = scrape(url)
    return {
        s.labels["resource"]: s.value
        for f in families
        for s in f.samples
        if s.name == "kubescale_kube_relists_total"
    }


def view(url) -> dict:
    """What one exporter sees: balloon pods by phase, watches up, the oldest sync."""
    families = scrape(url)
    return {
        "pods": {p: value(families, "kubescale_balloon_pods", phase=p) or 0 for p in PHASES},
        "watches_down": [
            s.labels["resource"]
            for f in families
            for s in f.samples
            if s.name == "kubescale_kube_watch_up" and s.value != 1
        ],
    }


def api_pods(fleet) -> dict:
    """The fleet's pods by phase, as the API server has them now (one list)."""
    counts = dict.fromkeys(PHASES, 0)
    listing = fleet.admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods", resourceVersion="0")
    for pod in listing["items"]:
        counts[pod.get("status", {}).get("phase", "Unknown")] += 1
    return counts


def whole(url, pods=None) -> bool:
    """Every watch of the exporter up and, given `pods`, its view the cluster's: that many
    pods, all Running (the old ones' deletions seen too)."""
    seen = view(url)
    if seen["watches_down"]:
        return False
    return pods is None or seen["pods"]["Running"] == sum(seen["pods"].values()) == pods


def relisted(url, before) -> bool:
    """Every watched resource listed again since `before` (its relists then)."""
    now = relists(url)
    return bool(now) and all(now[res] > before.get(res, 0) for res in now)


def wait(predicate, timeout, every=0.5):
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if predicate():
                return time.monotonic() - start
        except Exception:  # noqa: BLE001  (an exporter or API server still coming back)
            pass
        time.sleep(every)
    raise TimeoutError(f"not after {timeout}s")


def do_rollout(fleet, pods, stamp, timeout):
    names, total = rollout(fleet, pods, stamp)
    took = wait(lambda: rollout_done(fleet, names), timeout, every=2.0)
    return total, took


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--event-rate", type=float, default=200)
    ap.add_argument("--event-seconds", type=float, default=60)
    ap.add_argument("--timeout", type=float, default=1800)
    opts = ap.parse_args()
    say = peers.Log()

    r = {"load_start": open("/proc/loadavg").read().split()[0]}
    workdir = tempfile.mkdtemp(prefix="bench-churn-", dir="/tmp")
    size = FleetSize(nodes=opts.nodes, gpu_nodes=0, pods=opts.pods, gpu_pods=0)
    fleet = Fleet(workdir, size).start()
    exporters = {}
    try:
        fleet.create_nodes()
        fleet.wait_nodes_ready(timeout=opts.timeout)
        fleet.create_workload()
        fleet.wait_pods_running(timeout=opts.timeout)
        say(f"{opts.nodes} nodes, {opts.pods} pods Running")
        for name, selector in EXPORTERS.items():
            proc, url, _ = start_ours(fleet, workdir, selector)
            exporters[name] = (proc, url)

        def pods_of(name):
            return opts.pods if name == "every pod" else None

        for name, (_, url) in exporters.items():
            wait(lambda u=url, n=name: whole(u, pods_of(n)), 600)
        start_relists = {n: relists(u) for n, (_, u) in exporters.items()}
        r["at_start"] = {n: rss_mib(p.pid)[0] for n, (p, _) in exporters.items()}
        say(f"exporters whole; RSS {r['at_start']}")

        # 1. The rollout, watched.
        samplers = {n: Sampled(p) for n, (p, _) in exporters.items()}
        for s in samplers.values():
            s.__enter__()
        total, took = do_rollout(fleet, opts.pods, "1", opts.timeout)
        _, every_url = exporters["every pod"]
        caught_up = wait(lambda: whole(every_url, opts.pods), 600)
        for s in samplers.values():
            s.__exit__()
        r["rollout"] = {
            "pods": total,
            "seconds": took,
            "caught_up_s": caught_up,
            "exporters": {
                n: {
                    "cpu_s": s.cpu_s,
                    "cpu_s_per_min": s.cpu_s / s.seconds * 60,
                    "peak_mib": s.peak,
                    "rss_end_mib": s.rss_end,
                    "relists": sum(relists(exporters[n][1]).values())
                    - sum(start_relists[n].values()),
                }
                for n, s in samplers.items()
            },
        }
        say(f"rollout: {json.dumps(r['rollout'])}")

        # 2. The 410: stopped through a second rollout and a burst of pulls, the API server
        # restarted on a compacted etcd, then resumed.
        before = {n: relists(u) for n, (_, u) in exporters.items()}
        counted_before = {n: pull_counts(u) for n, (_, u) in exporters.items()}
        for proc, _ in exporters.values():
            proc.pause()
        stopped = time.monotonic()
        sent = {}

        def send():
            got = send_events(fleet, opts.event_rate, opts.event_seconds)
            sent.update(zip(("sent", "rate", "seconds", "errors"), got, strict=True))

        sender = threading.Thread(target=send)
        sender.start()
        total2, took2 = do_rollout(fleet, opts.pods, "2", opts.timeout)
        sender.join()
        say(f"stopped: rollout of {total2} pods in {took2:.0f}s, events {sent}")
        revision = etcd_compact(fleet.main_etcd.client_url)
        etcd_compact(fleet.events_etcd.client_url)
        fleet.api.restart()
        say(f"etcd compacted at {revision}, API server restarted")
        samplers = {n: Sampled(p) for n, (p, _) in exporters.items()}
        resumed = time.monotonic()
        for proc, _ in exporters.values():
            proc.resume()
        for s in samplers.values():
            s.__enter__()
        whole_after = {}
        for n, (_, u) in exporters.items():
            wait(lambda n=n, u=u: relisted(u, before[n]) and whole(u, pods_of(n)), 600, 0.25)
            whole_after[n] = time.monotonic() - resumed
        # Pulls counted: let the last ones in (the relist adds them at once if at all).
        time.sleep(5)
        for s in samplers.values():
            s.__exit__()
        after = {n: relists(u) for n, (_, u) in exporters.items()}
        counted = {
            n: {k: v - counted_before[n][k] for k, v in pull_counts(u).items()}
            for n, (_, u) in exporters.items()
        }
        r["relist"] = {
            "pods": total2,
            "rollout_s": took2,
            "stopped_s": resumed - stopped,
            "revision": revision,
            "events": {k: sent.get(k) for k in ("sent", "rate", "seconds")},
            "event_errors": len(sent.get("errors") or []),
            "api_pods": api_pods(fleet),
            "exporters": {
                n: {
                    "relists": {
                        res: after[n].get(res, 0) - before[n].get(res, 0) for res in after[n]
                    },
                    "whole_after_s": whole_after[n],
                    "cpu_s": samplers[n].cpu_s,
                    "peak_mib": samplers[n].peak,
                    "rss_end_mib": samplers[n].rss_end,
                    "counted": counted[n],
                    "pods_seen": view(exporters[n][1])["pods"],
                }
                for n in exporters
            },
        }
        say(f"relist: {json.dumps(r['relist'])}")
        r["load_end"] = open("/proc/loadavg").read().split()[0]
    finally:
        for proc, _ in exporters.values():
            try:
                proc.resume()
            except OSError:
                pass
            proc.stop()
        fleet.stop()
        subprocess.run(["rm", "-rf", workdir], check=False)
    write(opts, r, say.lines, fleet)


def write(opts, r, log, fleet):
    ro, rl = r["rollout"], r["relist"]
    names = list(EXPORTERS)
    sent = rl["events"]["sent"] or {}

    def row(label, cell):
        """A table row: `cell(exporter)` under each exporter."""
        return f"| {label} | " + " | ".join(cell(n) for n in names) + " |"

    def by_rollout(label, key, form=".1f"):
        return row(label, lambda n: format(ro["exporters"][n][key], form))

    def by_relist(label, key, form=".1f"):
        return row(label, lambda n: format(rl["exporters"][n][key], form))

    def sent_counted(reason):
        return row(
            f"{reason} sent / counted",
            lambda n: f"{sent.get(reason, 0):,} / {rl['exporters'][n]['counted'][reason]:,.0f}",
        )

    header = ["| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    lines = [
        f"# The running cluster-mode exporter: a {ro['pods']:,}-pod rollout and a 410",
        "",
        f"kwok fleet (testbed/fleet.py): {version_line(kube_binary('kube-apiserver'))} on a main "
        f"and an events etcd, {version_line(kwok_binary())}; "
        f"ours: {peers.ours()}; machine: 2 cores, 24 GiB, shared with other sessions' builds "
        f"and tests (load average {r['load_start']} at start, {r['load_end']} at the end; "
        "wall times are noisy). `python -m bench.cluster_churn --nodes "
        f"{opts.nodes} --pods {opts.pods} --event-rate {opts.event_rate:g} --event-seconds "
        f"{opts.event_seconds:g}`.",
        "",
        "*deploy* watches what deploy/base/cluster.yaml's collectors watch (no fleet pod is a",
        "balloon); *every pod* the same with --balloon.selector=app: every fleet pod cached.",
        "",
        f"## A {ro['pods']:,}-pod rollout",
        "",
        f"Every Deployment's template changed: {ro['pods']:,} pods replaced in "
        f"{ro['seconds']:.0f} s. {ro['caught_up_s']:.1f} s after the Deployments counted every "
        f"pod replaced, the every-pod exporter showed all {ro['pods']:,} new pods Running (the "
        "time includes kwok's marking them Running).",
        "",
        *header,
        by_rollout("CPU s over the rollout", "cpu_s"),
        by_rollout("CPU s per minute", "cpu_s_per_min", ".2f"),
        row("RSS at start, MiB", lambda n: f"{r['at_start'][n]:.1f}"),
        by_rollout("RSS peak in the rollout, MiB", "peak_mib"),
        by_rollout("relists", "relists", ".0f"),
        "",
        "## A 410: stopped through a rollout, the API server restarted",
        "",
        f"Both exporters stopped (SIGSTOP) for {rl['stopped_s']:.0f} s: a second rollout of "
        f"{rl['pods']:,} pods ({rl['rollout_s']:.0f} s) and "
        f"{sum(sent.values()):,} image-pull events "
        f"({rl['events']['rate']:.0f} a second: {rl['events']['sent']}, {rl['event_errors']} "
        "requests failed); etcd compacted "
        f"(revision {rl['revision']:,}) and the API server restarted; then resumed. The API "
        f"server's pods by phase at the end: {rl['api_pods']}.",
        "",
        *header,
        row(
            "relists, by resource",
            lambda n: ", ".join(
                f"{k} {v:.0f}" for k, v in sorted(rl["exporters"][n]["relists"].items())
            ),
        ),
        by_relist("view whole after the resume, s", "whole_after_s"),
        by_relist("CPU s from the resume", "cpu_s"),
        by_relist("RSS peak from the resume, MiB", "peak_mib"),
        by_relist("RSS at the end, MiB", "rss_end_mib"),
        sent_counted("Pulled"),
        sent_counted("Failed"),
        row(
            "pods Running as it sees them",
            lambda n: f"{rl['exporters'][n]['pods_seen']['Running']:,.0f}",
        ),
        "",
        "## Log",
        "",
        "```",
        *log,
        "```",
    ]
    RESULTS.with_suffix(".json").write_text(json.dumps({"opts": vars(opts), **r}, indent=1))
    peers.report(RESULTS, lines)


if __name__ == "__main__":
    main()
