"""`make demo`: watch the mixin work against real components on this machine, in minutes.

Starts, all on free loopback ports and in a temporary directory:
  - a real etcd 3.7 (.ci/setup.d/26-etcd.sh builds it) with a 16 MiB backend quota,
  - kube-scale-exporter twice: node mode (this host's neighbor tables) and cluster mode
    watching that etcd (--etcd.cluster main=URL),
  - Prometheus with the generated rules (rules/*.yaml), scraping both exporters and itself
    every 5 s, with the job names the mixin selects by default: 3.16 as
    .ci/setup.d/15-prometheus.sh builds it, whose web UI has no assets (its HTTP API
    answers), or `--prometheus PATH`, e.g. a release's binary with its UI.

Then it fills etcd the way an unwatched cluster does: objects under /registry/pods/ and a
flood of /registry/events/, to 85% of the quota (recording rules fill, quota alerts go
pending), then past it until etcd raises NOSPACE and refuses writes. Within about two
minutes KubeScaleEtcdAlarmActive goes pending, then firing. Every step is printed along
with the Prometheus URL to look at. Ctrl-C stops everything (each process by its PID).

    python -m tools.demo [--prometheus PATH] [--exit-when-firing] [--timeout SECONDS] [--keep]
"""

import argparse
import base64
import json
import pathlib
import shutil
import signal
import socket
import sys
import tempfile
import time

import requests

from testbed import prometheus
from testbed.etcd_server import CONTROL_PLANE_VERSION, EtcdServer, etcd_binary
from testbed.exporter import exporter_argv
from testbed.ports import free_port
from testbed.procs import Proc, wait_for_port
from testbed.prometheus import PrometheusServer

REPO = pathlib.Path(__file__).resolve().parent.parent
QUOTA = 16 * 1024 * 1024
VALUE = b"x" * (96 * 1024)
SCRAPE = "5s"
# The alert a newcomer should see go pending, then firing.
GOAL = "KubeScaleEtcdAlarmActive"
NODE_JOB, CLUSTER_JOB = "kube-scale-exporter-node", "kube-scale-exporter-cluster"


RULE_FILES = tuple(
    REPO / "rules" / name
    for name in (
        "prometheus_rules.yaml",
        "prometheus_alerts.yaml",
        "prometheus_selfprotection_alerts.yaml",
    )
)


def prometheus_config(node_port, cluster_port, prom_port, interval=SCRAPE, rule_files=RULE_FILES):
    target_labels = {"cluster": "demo"}
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            # In Kubernetes the node label comes from relabelling __meta_kubernetes_pod_node_name
            # (see docs/mixin.md); here it is a static label.
            {
                "job_name": NODE_JOB,
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{node_port}"],
                        "labels": dict(target_labels, node=socket.gethostname()),
                    }
                ],
            },
            {
                "job_name": CLUSTER_JOB,
                "static_configs": [
                    {"targets": [f"127.0.0.1:{cluster_port}"], "labels": target_labels}
                ],
            },
            # The opt-in self-protection group selects kube-prometheus' job name by default.
            {
                "job_name": "prometheus-k8s",
                "static_configs": [
                    {"targets": [f"127.0.0.1:{prom_port}"], "labels": target_labels}
                ],
            },
        ],
    }


class Etcd:
    """Writes through etcd's v3 JSON gateway, as the apiserver would through gRPC."""

    def __init__(self, url):
        self.url = url
        self.written = 0

    def _post(self, path, body):
        return requests.post(self.url + path, data=json.dumps(body), timeout=5).json()

    def put(self, key):
        """Store one object; False once etcd refuses writes (NOSPACE)."""
        reply = self._post(
            "/v3/kv/put",
            {
                "key": base64.b64encode(key.encode()).decode(),
                "value": base64.b64encode(VALUE).decode(),
            },
        )
        if "error" in reply or "message" in reply:
            return False
        self.written += 1
        return True

    def put_object(self):
        """Three events for every two pods: the share that makes events worth moving."""
        resource = "events" if self.written % 5 < 3 else "pods"
        return self.put(f"/registry/{resource}/demo/object-{self.written:06d}")

    def db_size(self):
        return int(self._post("/v3/maintenance/status", {}).get("dbSize", 0))

    def alarms(self):
        reply = self._post("/v3/maintenance/alarm", {"action": "GET"})
        return [a.get("alarm") for a in reply.get("alarms", [])]


def firing_or_pending(prom):
    """{(alertname, severity): state} of our alerts."""
    return {
        (r["metric"]["alertname"], r["metric"].get("severity", "")): r["metric"]["alertstate"]
        for r in prom.query('ALERTS{alertname=~"KubeScale.*"}')
    }


def exporter(args, port, workdir, name):
    proc = Proc(exporter_argv(port, args), workdir / f"{name}.log", cwd=str(REPO))
    wait_for_port(port, proc=proc, timeout=30)
    return proc


def report(start, prom, etcd, quiet=False):
    """One line: what the recording rules say and which alerts are pending or firing."""
    usage = prom.query("etcd_cluster_member:kubescale_etcd_quota_usage:ratio")
    usage_text = (
        ", ".join(
            f"{r['metric'].get('etcd_cluster')}/{r['metric'].get('member')} "
            f"{float(r['value'][1]):.0%} of quota"
            for r in usage
        )
        or "no data yet"
    )
    alerts = firing_or_pending(prom)
    alert_text = ", ".join(
        f"{name}({severity}) {state}" for (name, severity), state in sorted(alerts.items())
    )
    if not quiet:
        print(
            f"[{time.monotonic() - start:5.0f}s] etcd: {etcd.db_size() / 2**20:5.1f} MiB written "
            f"{etcd.written:4d} objects | recording rule: {usage_text} | alerts: {alert_text or 'none'}",
            flush=True,
        )
    return alerts


def run(opts, workdir):
    procs = []
    try:
        etcd_server = EtcdServer(workdir, name="etcd-0", quota_bytes=QUOTA).start()
        procs.append(etcd_server)
        etcd = Etcd(etcd_server.client_url)

        node_port, cluster_port = free_port(), free_port()
        prom = PrometheusServer(workdir, {}, binary=opts.prometheus)
        prom_port = prom.port
        procs.append(exporter(["--mode", "node"], node_port, workdir, "exporter-node"))
        procs.append(
            exporter(
                [
                    "--mode",
                    "cluster",
                    "--etcd.cluster",
                    f"main={etcd_server.client_url}",
                    "--etcd.min-interval",
                    "5",
                    "--etcd.keys-interval",
                    "30",
                ],
                cluster_port,
                workdir,
                "exporter-cluster",
            )
        )

        prom.config = prometheus_config(node_port, cluster_port, prom_port)
        procs.append(prom)
        prom.start()

        print(
            f"""
kube-scale-exporter mixin demo (logs and data in {workdir})
  Prometheus        http://127.0.0.1:{prom_port}/api/v1/alerts   (and /api/v1/rules, /api/v1/targets;
                    /alerts and /query where its web UI was built in)
  exporter, node    http://127.0.0.1:{node_port}/metrics
  exporter, cluster http://127.0.0.1:{cluster_port}/metrics
  etcd              {etcd_server.client_url}  (backend quota {QUOTA // 2**20} MiB)
Ctrl-C stops everything.
""",
            flush=True,
        )
        start = time.monotonic()
        deadline = start + opts.timeout

        print(
            "1. Filling etcd to 85% of its quota: the quota recording rule rises and "
            "KubeScaleEtcdDatabaseNearQuota goes pending (it needs 10m to fire).",
            flush=True,
        )
        last = 0.0
        while etcd.db_size() < 0.85 * QUOTA and etcd.put_object():
            if time.monotonic() - last > 5:
                last = time.monotonic()
                report(start, prom, etcd)
        hold_until = time.monotonic() + 30
        while time.monotonic() < hold_until:
            report(start, prom, etcd)
            time.sleep(5)

        print(
            "2. Writing past the quota: etcd raises NOSPACE and refuses writes; "
            f"{GOAL} goes pending, then fires after its 1m `for`.",
            flush=True,
        )
        while etcd.put_object() and time.monotonic() < deadline:
            pass
        print(f"   etcd refused write {etcd.written + 1}: alarms {etcd.alarms()}", flush=True)

        while time.monotonic() < deadline:
            alerts = report(start, prom, etcd)
            if alerts.get((GOAL, "critical")) == "firing":
                print(
                    f"\n{GOAL} is firing after {time.monotonic() - start:.0f}s. Look around in "
                    f"Prometheus; Ctrl-C when done.",
                    flush=True,
                )
                if opts.exit_when_firing:
                    return 0
                while True:
                    time.sleep(3600)
            time.sleep(5)
        print(
            f"{GOAL} did not fire within {opts.timeout:.0f}s; see the logs in {workdir}",
            file=sys.stderr,
        )
        return 1
    finally:
        for proc in reversed(procs):
            proc.stop()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--exit-when-firing",
        action="store_true",
        help=f"stop once {GOAL} fires instead of waiting for Ctrl-C",
    )
    parser.add_argument(
        "--timeout", type=float, default=600, help="give up after this many seconds"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument(
        "--prometheus",
        metavar="PATH",
        help="the Prometheus binary to run (default: 3.16, .ci/setup.d/15-prometheus.sh's, "
        "without the web UI's assets)",
    )
    opts = parser.parse_args(argv)
    # Stop cleanly on Ctrl-C even when started in the background (which ignores SIGINT), and
    # on SIGTERM: the finally blocks stop every process and remove the directory.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        etcd_binary(CONTROL_PLANE_VERSION)
        opts.prometheus = opts.prometheus or prometheus.newest("prometheus")
    except FileNotFoundError as e:
        parser.exit(2, f"{e}\n")
    if not shutil.which(opts.prometheus):
        parser.exit(2, f"--prometheus {opts.prometheus}: not an executable\n")
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="kubescale-demo-"))
    try:
        return run(opts, workdir)
    except KeyboardInterrupt:
        print("\nstopped")
        return 0
    finally:
        if not opts.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
