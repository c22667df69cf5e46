"""Fixtures for the etcd collector tests: real etcd members, collectors built from flags."""

import json
import re
from pathlib import Path

import pytest

from kube_scale_exporter.cli import parse
from kube_scale_exporter.scrape import Scraper
from kube_scale_exporter.web.exposition import encode_text
from testbed.etcd_server import CONTROL_PLANE_VERSION, VERSIONS, EtcdServer, start_cluster
from testbed.metrics import collect


# What real etcd members sent (python -m fuzz.capture etcd): status-3.5.30, -3.6, -3.7.
SENT = Path(__file__).resolve().parents[2] / "fuzz" / "corpus" / "etcd_json"


def sent_status(etcd: str, /, **changes) -> dict:
    """The Status document etcd `etcd` sent, with fields changed (None: left out)."""
    doc = json.loads((SENT / f"status-{etcd}").read_text())
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


@pytest.fixture(params=VERSIONS)
def version(request):
    return request.param


def quota_source(version: str) -> str:
    """Where the collector takes a member's quota from: the Status of etcd 3.6 and 3.7 has
    dbSizeQuota, 3.5 tells it only on its /metrics page."""
    return "metrics" if version.startswith("3.5") else "status"


def storage_version(version: str) -> str | None:
    """Status' storageVersion of a member alone on its fresh data: etcd 3.6 and 3.7 send
    their own ("3.7.0"; the data migrated as soon as the cluster version was set), 3.5 none."""
    return None if version.startswith("3.5") else f"{version[:3]}.0"


@pytest.fixture
def etcd_factory(tmp_path):
    """start(version=..., name=..., **EtcdServer options) -> a running member, stopped after."""
    started = []

    def start(version=CONTROL_PLANE_VERSION, name="default", **kw):
        member = EtcdServer(tmp_path / f"{name}-{len(started)}", version=version, name=name, **kw)
        started.append(member)
        return member.start()

    def cluster(size=3, version=CONTROL_PLANE_VERSION, **kw):
        members = start_cluster(
            tmp_path / f"cluster-{len(started)}", size=size, version=version, **kw
        )
        started.extend(members)
        return members

    start.cluster = cluster
    yield start
    for member in started:
        member.stop()


@pytest.fixture
def collector_factory():
    """make(*flags) -> the etcd collector built by the real CLI parser, closed after."""
    made = []

    def make(*flags, mode="cluster", start=False):
        args, classes = parse(["--mode", mode, "--collector.disable-defaults", *flags])
        assert [c.name for c in classes] == ["etcd"]
        collector = classes[0](args)
        if start:
            collector.start()
        made.append(collector)
        return collector

    yield make
    for c in made:
        c.close()


def samples(collector_or_families):
    """{(name, frozenset(labels.items())): value} of one collect()."""
    families = collector_or_families
    if hasattr(collector_or_families, "observe"):
        families = collect(collector_or_families)
    return {(s.name, frozenset(s.labels.items())): s.value for f in families for s in f.samples}


def value(found, name, **labels):
    return found[(name, frozenset(labels.items()))]


def scrape_text(scraper: Scraper, timeout: float) -> str:
    return encode_text(scraper.scrape(timeout).families).decode()


def success_of(text: str, collector: str) -> float:
    match = re.search(rf'kubescale_scrape_collector_success{{collector="{collector}"}} (\S+)', text)
    return float(match.group(1))
