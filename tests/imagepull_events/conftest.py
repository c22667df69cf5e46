"""The imagepull_events collector on the test API server, for the tests of this folder."""

import pytest

from kube_scale_exporter.cli import parse
from kube_scale_exporter.collectors.imagepull_events import ImagePullEventsCollector


@pytest.fixture
def events_collector(kubeconfig_for):
    """start(*flags) -> the collector built by the real CLI parser and started, with exactly
    the RBAC its pod is granted (kubeconfig_for); closed after the test."""
    made = []

    def start(*flags):
        rules = ImagePullEventsCollector.needs_in("cluster").rbac_rules
        args, classes = parse(
            [
                "--mode",
                "cluster",
                "--collector.disable-defaults",
                "--collector.imagepull_events",
                *flags,
                "--kube.kubeconfig",
                kubeconfig_for("imagepull-events", rules),
            ]
        )
        assert classes == [ImagePullEventsCollector]
        collector = ImagePullEventsCollector(args)
        collector.start()
        made.append(collector)
        return collector

    yield start
    for collector in made:
        collector.close()
