"""Fixtures for the mixin tests; the helpers they use live in support.py."""
import pytest

from tests.mixin.support import CUSTOM_CONFIG, binary, build


@pytest.fixture(scope="session")
def mixin():
    """The mixin with its default config, as plain data: config, alerts, rules, dashboards."""
    return build.mixin_object()


@pytest.fixture(scope="session")
def customised():
    """The mixin with CUSTOM_CONFIG merged over its defaults."""
    return build.mixin_object(CUSTOM_CONFIG)


@pytest.fixture(scope="session")
def rendered():
    """Every generated file's path and content, rendered from the jsonnet once per session."""
    return build.render()


@pytest.fixture(scope="session")
def promtool():
    return binary("promtool")
