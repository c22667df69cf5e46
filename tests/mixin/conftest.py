"""Fixtures for the mixin tests; the helpers they use live in support.py."""

import pytest

from tests.mixin.support import (
    CUSTOM_CONFIG,
    EVERYTHING,
    PROMETHEUS_RELEASES,
    build,
    prometheus_binary,
    prometheus_version,
)


@pytest.fixture(scope="session")
def mixin():
    """The mixin with its default config, as plain data: config, alerts, rules, dashboards."""
    return build.mixin_object()


@pytest.fixture(scope="session")
def everything():
    """The mixin with every opt-in alert group switched on."""
    return build.mixin_object(EVERYTHING)


@pytest.fixture(scope="session")
def customised():
    """The mixin with CUSTOM_CONFIG merged over its defaults."""
    return build.mixin_object(CUSTOM_CONFIG)


@pytest.fixture(scope="session")
def rendered():
    """Every generated file's path and content, rendered from the jsonnet once per session."""
    return build.render()


@pytest.fixture(params=sorted(PROMETHEUS_RELEASES), ids=lambda r: f"prometheus-{r}")
def prometheus_release(request):
    """Each Prometheus release the rules must work on (Debian's 2.42, upstream 3.5)."""
    return request.param


@pytest.fixture
def promtool(prometheus_release, record_property):
    path = prometheus_binary(prometheus_release, "promtool")
    record_property("promtool_version", prometheus_version(path))
    return path


def pytest_report_header(config):
    lines = []
    for release in sorted(PROMETHEUS_RELEASES):
        for name in ("promtool", "prometheus"):
            path = PROMETHEUS_RELEASES[release][name]()
            lines.append(f"mixin tests: {name} {release}: {path or 'MISSING'}")
    return lines
