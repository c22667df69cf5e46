"""Shared by every test area; each area keeps its own fixtures in tests/AREA/conftest.py.

`scripted`: collectors with controllable behaviour, to drive the scrape machinery (the
scraper, check and the HTTP server) without any backend.
"""
import threading

import pytest
from prometheus_client.core import GaugeMetricFamily

from kube_scale_exporter.registry import Collector


class Scripted(Collector):
    """A collector whose next scrape does what the test says: return, raise or hang."""

    def __init__(self, name, value=1.0, findings=()):
        self.name = name
        self.value = value
        self.error = None
        self.hang = threading.Event()   # set: collect blocks until `release` is set
        self.release = threading.Event()
        self.calls = 0
        self._findings = list(findings)

    def observe(self):
        self.calls += 1
        if self.hang.is_set():
            self.release.wait(30)
        if self.error:
            raise self.error
        return (self.name, self.value, self._findings)

    @staticmethod
    def families(state):
        name, value, _ = state
        g = GaugeMetricFamily(f"kubescale_test_{name}", "A test value.")
        g.add_metric([], value)
        return [g]

    @staticmethod
    def advise(state):
        return state[2]


@pytest.fixture
def scripted():
    made = []

    def make(name, **kw):
        c = Scripted(name, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.release.set()
