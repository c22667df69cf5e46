"""The watches' health series every scrape carries, from fixed health readings."""

import pytest

from kube_scale_exporter.kube import Resource, health_families
from kube_scale_exporter.kube.health import Health
from testbed.golden import assert_golden

pytestmark = pytest.mark.unit


class Reading:
    """What health_families reads of an informer: its resource and a health snapshot."""

    def __init__(self, plural, up, age, relists):
        self.resource = Resource("/api/v1", plural)
        self._health = Health(plural, up, age, relists)

    def health(self):
        return self._health


def test_kube_health_golden():
    informers = [
        Reading("pods", True, 12.5, 0),
        Reading("priorityclasses", False, 340.0, 2),
        Reading("events", True, None, 0),
    ]
    assert_golden("kube", health_families(informers))
