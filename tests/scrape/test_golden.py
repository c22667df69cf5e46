"""The exporter's own series, as every scrape carries them."""

import pytest

from kube_scale_exporter.scrape import Outcome, build_info, collector_status
from testbed.golden import assert_golden

pytestmark = pytest.mark.unit


def test_exporter_series_golden():
    outcomes = [Outcome("etcd", False, 2.0, "timed out"), Outcome("neighbor", True, 0.0012)]
    assert_golden("exporter", [build_info("0.1.0", "3.11.7"), *collector_status(outcomes)])
