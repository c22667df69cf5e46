"""Scenario 1: the host's ARP table past gc_thresh3 for a few seconds, seen by the DaemonSet
pod (hostNetwork) and alerted by Prometheus."""

import time

from testbed.netns import NetNS, neighbor_adds

from .conftest import TIMINGS, wait_for

OVERFLOWS = 'kubescale_neighbor_table_overflows_total{job="kube-scale-exporter-node",family="ipv4"}'


def test_neighbor_overflow_fires_alert(prom):
    t = time.monotonic()
    before = wait_for(
        "overflow counter scraped", lambda: prom.value(OVERFLOWS) is not None or None, timeout=60
    )
    before = prom.value(OVERFLOWS)
    thresh3 = int(prom.value('kubescale_neighbor_gc_thresh3{family="ipv4"}'))
    assert not prom.firing("KubeScaleNeighborTableOverflow")
    # Fresh STALE entries in a throwaway namespace: forced GC frees none of them, so the
    # adds past gc_thresh3 fail with ENOBUFS. The table is the host's, shared by every
    # namespace: hold it full just long enough for one scrape, then delete the namespace.
    with NetNS("kse-e2e-ovf") as ns:
        result = ns.batch(neighbor_adds(thresh3 + 200, "ipv4", "stale"), force=True)
        assert "No buffer space available" in result.stderr
        wait_for(
            "entries past gc_thresh3 scraped",
            lambda: (
                (
                    prom.value(
                        'kubescale_neighbor_entries{job="kube-scale-exporter-node",family="ipv4"}'
                    )
                    or 0
                )
                >= thresh3
            ),
            timeout=15,
            interval=0.5,
        )
    wait_for("overflow counter increased", lambda: prom.value(OVERFLOWS) > before, timeout=30)
    alert = wait_for(
        "KubeScaleNeighborTableOverflow firing",
        lambda: prom.firing("KubeScaleNeighborTableOverflow"),
        timeout=60,
    )
    assert alert[0]["labels"]["node"] == "kse-e2e-node" and alert[0]["labels"]["family"] == "ipv4"
    # The namespace is gone: the table has room again (the kernel frees in the background).
    wait_for(
        "ARP table below gc_thresh3 again",
        lambda: (
            prom.value('kubescale_neighbor_entries{job="kube-scale-exporter-node",family="ipv4"}')
            < thresh3
        ),
        timeout=30,
    )
    TIMINGS["scenario_neighbor"] = time.monotonic() - t
