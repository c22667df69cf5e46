"""Bad input at small scale for the cluster-mode exporter on a real kube-apiserver: an
event storm, a 410 in the middle of it, then more Pulled events than
--image-pull.max-cached-events. The exporter stays inside the Deployment's memory limit,
counts every event once while the cache fits, says what it dropped past the cap (its log,
the collector failing) and recovers by itself when events expire (deleted here, as the
API server's --event-ttl does)."""

import pathlib
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from testbed.procs import rss_mib
from tests.deploy.conftest import deployment_memory_limit
from tests.reliability.conftest import COLLECTORS
from tests.reliability.test_cluster_faults import status_body

pytestmark = pytest.mark.integration

EVENTS_WATCH = r"/api/v1/events\?.*reason%3DPulled.*watch=1"
PULLED = 'Successfully pulled image "registry.example.com/app:{i}" in 1.5s (4s including waiting)'
CAP = 300


def post_pulled(api, ns, indexes):
    def one(i):
        api.admin.create(
            f"/api/v1/namespaces/{ns}/events",
            {
                "metadata": {"name": f"storm-{i:05d}"},
                "involvedObject": {"kind": "Pod", "name": f"p{i}", "namespace": ns},
                "reason": "Pulled",
                "message": PULLED.format(i=i % 7),
                "type": "Normal",
                "source": {"component": "kubelet", "host": f"node-{i % 5}"},
            },
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, indexes))


def pulled_count(scrape):
    return scrape.value("kubescale_image_pull_duration_seconds_count")


def test_storm_410_and_past_the_cap_then_recovery(cluster, proxy, run_exporter, workdir):
    ns = "storm-" + uuid.uuid4().hex[:6]
    cluster.admin.create("/api/v1/namespaces", {"metadata": {"name": ns}})
    others = len(cluster.admin.get("/api/v1/events", fieldSelector="reason=Pulled")["items"])
    kubeconfig = cluster.write_kubeconfig(f"{workdir}/kubeconfig", server=proxy.url)
    exporter = run_exporter(
        [
            "--mode=cluster",
            f"--kube.kubeconfig={kubeconfig}",
            "--balloon.selector=run=overprovisioning",
            f"--etcd.cluster=main={cluster.etcd.client_url}",
            f"--image-pull.max-cached-events={others + CAP}",
            *(f"--collector.{name}" for name in sorted(COLLECTORS)),
        ]
    )
    exporter.wait_for(lambda s: all(s.success.get(n) == 1 for n in COLLECTORS), within=15)
    time.sleep(1.1)  # events of the start's second may count or not (whole seconds)

    # A storm of 250, with the Pulled watch ended by a 410 in the middle of it: the relist
    # hands over what the watch missed, and nothing is counted twice.
    proxy.inject(EVENTS_WATCH, status=410, body=status_body(410, "Expired"), times=1)
    with ThreadPoolExecutor(2) as pool:
        storm = pool.submit(post_pulled, cluster, ns, range(250))
        time.sleep(0.3)
        proxy.cut_streams(EVENTS_WATCH)
        storm.result()
    s = exporter.wait_for(lambda s: pulled_count(s) == 250, within=30)
    assert s.value("kubescale_kube_relists_total", resource="events") >= 1
    assert all(s.success.get(n) == 1 for n in COLLECTORS)

    # Past the cap: the collector fails, alone, and says why once in its log.
    post_pulled(cluster, ns, range(250, CAP + 50))
    s = exporter.wait_for(lambda s: s.success.get("imagepull_events") == 0, within=30)
    assert all(s.success.get(n) == 1 for n in COLLECTORS - {"imagepull_events"})
    assert s.value("kubescale_kube_watch_up", resource="events") == 0
    said = f"more than {others + CAP} events to cache: the cache is dropped"
    lines = [
        line for line in pathlib.Path(exporter.log_path).read_text().splitlines() if said in line
    ]
    # Once from the informer, once from the scrape when the collector's error began.
    assert len(lines) == 2, lines
    assert sum("logger=kube_scale_exporter.kube.informer" in line for line in lines) == 1, lines

    # Events expire: once they fit again the collector recovers by itself; the events of
    # the overflow are not counted (the log said so), those before it stay counted once.
    for i in range(100):
        cluster.admin.delete(f"/api/v1/namespaces/{ns}/events/storm-{i:05d}")
    s = exporter.wait_for(lambda s: s.success.get("imagepull_events") == 1, within=30)
    assert pulled_count(s) == CAP  # counted up to the cap, then nothing more
    assert "within the cap of" in pathlib.Path(exporter.log_path).read_text()
    post_pulled(cluster, ns, range(1000, 1010))  # and it is watching again
    exporter.wait_for(lambda s: pulled_count(s) == CAP + 10, within=15)

    assert rss_mib(exporter.proc.pid)[1] < deployment_memory_limit() / (1 << 20)
    cluster.admin.delete(f"/api/v1/namespaces/{ns}")
