"""Fixtures for the neighbor collectors: throwaway namespaces and collectors built from flags."""

import pytest

from kube_scale_exporter.cli import parse
from testbed.netns import NetNS


@pytest.fixture
def netns():
    """A fresh namespace with a veth pair up; deleted after the test, pass or fail."""
    with NetNS() as ns:
        yield ns


def make_collector(*flags):
    """The collector(s) enabled by these flags, built as the CLI builds them."""
    args, classes = parse(["--collector.disable-defaults", *flags])
    return [cls(args) for cls in classes]


@pytest.fixture
def collectors():
    """make_collector, closing every collector it made after the test."""
    made = []

    def build(*flags):
        built = make_collector(*flags)
        made.extend(built)
        return built

    yield build
    for c in made:
        c.close()
