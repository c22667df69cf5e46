"""Scenario 3: balloons preempted by the real scheduler.

Two balloons (priority -1, the cluster-autoscaler FAQ's `run=overprovisioning` label the
Deployment's --balloon.selector matches) fill the node's free CPU; a pod of default
priority that needs more than what is left makes the scheduler preempt both. They come
back Pending (no room), none Running: KubeScaleBalloonHeadroomExhausted. Then a balloon
with a PriorityClass below the autoscaler's cutoff (-10) is flagged as misconfigured.
"""

import time

from testbed.node import PAUSE_IMAGE as PAUSE
from testbed.node import free_cpu

from .conftest import TIMINGS, wait_for

NS = "e2e-balloon"
CLUSTER = '{job="kube-scale-exporter-cluster"}'


def deployment(name, replicas, cpu, priority_class):
    labels = {"run": "overprovisioning", "balloon": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "priorityClassName": priority_class,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "pause",
                            "image": PAUSE,
                            "resources": {"requests": {"cpu": f"{cpu}m"}},
                        }
                    ],
                },
            },
        },
    }


def test_balloons_preempted_headroom_exhausted(prom, kube):
    t = time.monotonic()
    kube.post(
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"metadata": {"name": "overprovisioning"}, "value": -1, "globalDefault": False},
    )
    kube.post(
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"metadata": {"name": "e2e-below-cutoff"}, "value": -20, "globalDefault": False},
    )
    kube.namespace(NS)
    try:
        free = free_cpu(kube.get)
        balloon = free * 2 // 5
        kube.post(
            f"/apis/apps/v1/namespaces/{NS}/deployments",
            deployment("balloons", 2, balloon, "overprovisioning"),
        )
        wait_for(
            "2 balloons Running",
            lambda: (
                prom.value(
                    'kubescale_balloon_pods{job="kube-scale-exporter-cluster",phase="Running"}'
                )
                == 2
            ),
            timeout=90,
        )
        reserved = prom.value('kubescale_balloon_reserved{resource="cpu"}')
        assert abs(reserved - 2 * balloon / 1000) < 0.01, reserved
        before = prom.value(f"kubescale_balloon_preemptions_total{CLUSTER}")
        assert not prom.firing("KubeScaleBalloonHeadroomExhausted")
        # A real workload that fits only once both balloons are gone.
        kube.post(
            f"/api/v1/namespaces/{NS}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "real-work"},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "pause",
                            "image": PAUSE,
                            "resources": {"requests": {"cpu": f"{free * 7 // 10}m"}},
                        }
                    ],
                },
            },
        )
        wait_for(
            "real pod Running",
            lambda: (
                kube.get(f"/api/v1/namespaces/{NS}/pods/real-work")["status"].get("phase")
                == "Running"
            ),
            timeout=90,
        )
        wait_for(
            "preemptions counted",
            lambda: prom.value(f"kubescale_balloon_preemptions_total{CLUSTER}") >= before + 1,
            timeout=60,
        )
        wait_for(
            "balloons all Pending",
            lambda: (
                prom.value(
                    'kubescale_balloon_pods{job="kube-scale-exporter-cluster",phase="Pending"}'
                )
                == 2
                and prom.value(
                    'kubescale_balloon_pods{job="kube-scale-exporter-cluster",phase="Running"}'
                )
                == 0
            ),
            timeout=60,
        )
        wait_for(
            "KubeScaleBalloonHeadroomExhausted firing",
            lambda: prom.firing("KubeScaleBalloonHeadroomExhausted"),
            timeout=60,
        )
        TIMINGS["scenario_balloon_exhausted"] = time.monotonic() - t
        # A balloon the autoscaler ignores: priority below --expendable-pods-priority-cutoff.
        kube.post(
            f"/apis/apps/v1/namespaces/{NS}/deployments",
            deployment("too-low", 1, 1, "e2e-below-cutoff"),
        )
        wait_for(
            "misconfigured balloon flagged",
            lambda: (
                prom.value(
                    'kubescale_balloon_misconfigured{reason="priority_below_autoscaler_cutoff"}'
                )
                == 1
            ),
            timeout=60,
        )
        alert = wait_for(
            "KubeScaleBalloonMisconfigured firing",
            lambda: prom.firing("KubeScaleBalloonMisconfigured"),
            timeout=60,
        )
        assert alert[0]["labels"]["reason"] == "priority_below_autoscaler_cutoff", alert
    finally:
        kube.delete(f"/api/v1/namespaces/{NS}")
        for pc in ("overprovisioning", "e2e-below-cutoff"):
            kube.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{pc}")
    wait_for(
        "namespace gone",
        lambda: kube.s.get(f"{kube.server}/api/v1/namespaces/{NS}", timeout=10).status_code == 404,
        timeout=120,
        interval=2,
    )
    TIMINGS["scenario_balloon"] = time.monotonic() - t
