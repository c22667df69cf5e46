"""Fixtures for the mixin tests; the helpers they use live in support.py."""

import pytest

from testbed import builds, prometheus
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


@pytest.fixture(params=PROMETHEUS_RELEASES, ids=lambda r: f"prometheus-{r}")
def prometheus_release(request):
    """Each Prometheus release the rules must work on (3.13, the LTS, and 3.16)."""
    return request.param


@pytest.fixture
def promtool(prometheus_release, record_property):
    path = prometheus_binary(prometheus_release, "promtool")
    record_property("promtool_version", prometheus_version(path))
    return path


def pytest_report_header(config):
    lines = []
    for release in PROMETHEUS_RELEASES:
        for name in prometheus.NAMES:
            try:
                path = prometheus.binary(release, name)
            except FileNotFoundError as e:
                path = f"MISSING ({e})"
            lines.append(f"mixin tests: {name} {release}: {path}")
    for name, finder in (
        ("mixtool", builds.mixtool_binary),
        ("dashboard-linter", builds.dashboard_linter_binary),
    ):
        try:
            path = finder()
        except FileNotFoundError as e:
            lines.append(f"mixin tests: {name}: MISSING ({e})")
            continue
        lines.append(f"mixin tests: {name} {builds.stamped_version(path)}: {path}")
    return lines
