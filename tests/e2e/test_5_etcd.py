"""Scenario 4: etcd at quota, main vs events.

The API server keeps events in a second etcd (`--etcd-servers-overrides=/events#...`) with
an 8 MiB quota. The e2e overlay (tests/e2e/overlay) makes the cluster Deployment watch both
clusters with their alarm lists, and the key-less etcd-node DaemonSet (deploy's default)
read both members' metrics listeners, main's on kubeadm's 127.0.0.1:2381; the node gets
the control-plane label, so the etcd-node pod replaces the plain node pod on it. Real
events with big messages then fill the events etcd until it raises NOSPACE: the Deployment
sees the alarm, the key-less pod the writes etcd refuses.
"""

import base64
import time

import requests

from testbed.control_plane import EVENTS_PORT
from testbed.node import NODE_IP

from .conftest import (
    HERE,
    NODE_NAME,
    NS,
    TIMINGS,
    running_and_ready,
    wait_exporters_ready,
    wait_for,
)

CLUSTER = 'job="kube-scale-exporter-cluster"'
NODE = 'job="kube-scale-exporter-node"'
ROLE = "node-role.kubernetes.io/control-plane"
EVENTS = f"http://{NODE_IP}:{EVENTS_PORT}"


def etcd_gateway(path, body):
    s = requests.Session()
    s.trust_env = False
    r = s.post(EVENTS + path, json=body, timeout=60)
    r.raise_for_status()
    return r.json()


def recover_events_etcd():
    """etcd's documented NOSPACE recovery: compact, defragment, disarm each alarm."""
    head = etcd_gateway("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})
    etcd_gateway("/v3/kv/compaction", {"revision": head["header"]["revision"], "physical": True})
    etcd_gateway("/v3/maintenance/defragment", {})
    for alarm in etcd_gateway("/v3/maintenance/alarm", {"action": "GET"}).get("alarms", []):
        etcd_gateway("/v3/maintenance/alarm", {"action": "DEACTIVATE", **alarm})


def event(i, size):
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"e2e-fill-{i}", "namespace": "default"},
        "involvedObject": {"kind": "Namespace", "name": "default", "apiVersion": "v1"},
        "reason": "E2EFill",
        "type": "Normal",
        "message": "x" * size,
        "source": {"component": "kse-e2e"},
    }


def node_pod_back(kube) -> bool:
    """The node DaemonSet's pod Running and ready, and no etcd-node pod left."""
    if kube.pods(selector="kube-scale-exporter/placement=etcd"):
        return False
    pods = kube.pods(selector="kube-scale-exporter/placement=all")
    return bool(pods) and all(map(running_and_ready, pods))


def test_events_etcd_nospace_alarm_names_events(prom, kube, cluster):
    t = time.monotonic()
    # The overlay's cluster Deployment mounts it.
    cluster.etcd_client_secret(NS, "kse-e2e-etcd-client")
    kube.apply_kustomization(HERE / "overlay")
    kube.patch(f"/api/v1/nodes/{NODE_NAME}", {"metadata": {"labels": {ROLE: ""}}})
    try:
        # The etcd-node pod replaces the node pod on the control-plane node.
        wait_for(
            "etcd-node pod Running",
            lambda: [
                p
                for p in kube.pods(selector="kube-scale-exporter/placement=etcd")
                if p["status"].get("phase") == "Running"
                and all(c.get("ready") for c in p["status"].get("containerStatuses", []))
            ],
            timeout=180,
            interval=2,
        )
        wait_for(
            "main and events watched from the cluster Deployment",
            lambda: (
                prom.value(f'kubescale_etcd_up{{{CLUSTER},etcd_cluster="main"}}') == 1
                and prom.value(f'kubescale_etcd_up{{{CLUSTER},etcd_cluster="events"}}') == 1
            ),
            timeout=120,
        )
        # The etcd-node pod (relabelled to the node job) sees its local member without a key,
        # as nobody, with no host file mounted.
        [pod] = kube.pods(selector="kube-scale-exporter/placement=etcd")
        spec = pod["spec"]
        assert not [v for v in spec.get("volumes", ()) if "hostPath" in v and "etcd" in v["name"]]
        assert spec["securityContext"]["runAsUser"] == 65534
        assert "runAsUser" not in spec["containers"][0]["securityContext"]
        wait_for(
            "local members from the key-less etcd-node DaemonSet",
            lambda: (
                prom.value(f'kubescale_etcd_up{{{NODE},etcd_cluster="main"}}') == 1
                and prom.value(f'kubescale_etcd_up{{{NODE},etcd_cluster="events"}}') == 1
            ),
            timeout=90,
        )
        # Its size and quota are the Deployment's, which reads Status with a key.
        assert prom.value(f'kubescale_etcd_quota_bytes{{{NODE},etcd_cluster="events"}}') == (
            8 * 1024 * 1024
        )
        assert not prom.query(f"kubescale_etcd_alarm_active{{{NODE}}}")
        quota = prom.value(f'kubescale_etcd_quota_bytes{{{CLUSTER},etcd_cluster="events"}}')
        assert quota == 8 * 1024 * 1024, quota
        assert not prom.firing("KubeScaleEtcdAlarmActive")
        # Fill the events etcd through the API server until etcd refuses writes.
        errors = ""
        for i in range(200):
            r = kube.s.post(
                f"{kube.server}/api/v1/namespaces/default/events",
                json=event(i, 512 * 1024),
                timeout=30,
            )
            if r.status_code >= 400:
                errors = r.text
                break
        assert "database space exceeded" in errors, errors[:500]
        # Writes go on being refused while the alarm is raised: 30 more, a tenth a second over
        # the 5-minute window, above KubeScaleEtcdWritesRefused's threshold of 0.05.
        for i in range(30):
            r = kube.s.post(
                f"{kube.server}/api/v1/namespaces/default/events",
                json=event(1000 + i, 1024),
                timeout=30,
            )
            assert r.status_code >= 400 and "database space exceeded" in r.text, r.text[:300]
        # Main keeps taking writes: only events are refused.
        kube.post("/api/v1/namespaces/default/configmaps", {"metadata": {"name": "e2e-main-ok"}})
        wait_for(
            "NOSPACE on events",
            lambda: (
                prom.value(
                    f'kubescale_etcd_alarm_active{{{CLUSTER},etcd_cluster="events",alarm="NOSPACE"}}'
                )
                == 1
            ),
            timeout=60,
        )
        assert (
            prom.value(
                f'kubescale_etcd_alarm_active{{{CLUSTER},etcd_cluster="main",alarm="NOSPACE"}}'
            )
            == 0
        )
        alert = wait_for(
            "KubeScaleEtcdAlarmActive firing",
            lambda: prom.firing("KubeScaleEtcdAlarmActive"),
            timeout=90,
        )
        assert {a["labels"]["etcd_cluster"] for a in alert} == {"events"}, alert
        assert alert[0]["labels"]["alarm"] == "NOSPACE"
        # The key-less pod saw the same NOSPACE as refused writes (the API server's Txns),
        # on events only; its alert stays silent because AlarmActive already says NOSPACE.
        refused = wait_for(
            "refused writes seen without a key",
            lambda: (
                (
                    prom.value(
                        f'sum(kubescale_etcd_writes_refused_total{{{NODE},etcd_cluster="events"}})'
                    )
                    or 0
                )
                >= 31
                and prom.value(
                    "sum(etcd_cluster_member:kubescale_etcd_writes_refused:rate5m"
                    '{etcd_cluster="events"})'
                )
            ),
            timeout=60,
        )
        assert refused > 0.05, refused
        assert (
            prom.value(f'sum(kubescale_etcd_writes_refused_total{{{NODE},etcd_cluster="main"}})')
            == 0
        )
        time.sleep(20)  # past the alert's `for` (15 s here): it would be firing by now
        assert not prom.alerts("KubeScaleEtcdWritesRefused")
        TIMINGS["scenario_etcd_alarm"] = time.monotonic() - t
    finally:
        kube.s.delete(
            f"{kube.server}/api/v1/namespaces/default/events",
            params={"fieldSelector": "reason=E2EFill"},
            timeout=60,
        )
        kube.delete("/api/v1/namespaces/default/configmaps/e2e-main-ok")
        recover_events_etcd()
        kube.patch(f"/api/v1/nodes/{NODE_NAME}", {"metadata": {"labels": {ROLE: None}}})
        unlabelled = time.monotonic()
    wait_for(
        "alarm cleared",
        lambda: (
            prom.value(
                f'kubescale_etcd_alarm_active{{{CLUSTER},etcd_cluster="events",alarm="NOSPACE"}}'
            )
            == 0
        ),
        timeout=60,
    )
    # The etcd-node pod goes and the node pod takes the node's port again. Done only when
    # the node pod is Running and ready and Prometheus scrapes it from the node job's own
    # pool: a test that starts while the pod is still starting sees its target down, for
    # longer if it restarts the API server that the pod's start waits on.
    wait_for("the node pod back, the etcd-node pod gone", lambda: node_pod_back(kube), timeout=180)
    wait_exporters_ready(kube)
    wait_for(
        "the node pod scraped from the node job's pool",
        lambda: [
            t
            for t in prom.targets()
            if t["scrapePool"] == "kube-scale-exporter-node" and t["health"] == "up"
        ],
        timeout=60,
    )
    TIMINGS["node_pod_back"] = time.monotonic() - unlabelled
    TIMINGS["scenario_etcd"] = time.monotonic() - t
