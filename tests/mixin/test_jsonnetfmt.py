"""Every jsonnet file is formatted as `jsonnetfmt` would format it."""

import subprocess

import pytest

from tests.mixin.support import REPO, binary

SOURCES = sorted([*(REPO / "mixin").rglob("*.jsonnet"), *(REPO / "mixin").rglob("*.libsonnet")])


@pytest.mark.unit
def test_there_are_sources():
    assert len(SOURCES) >= 15


@pytest.mark.integration
def test_jsonnetfmt():
    out = subprocess.run(
        [binary("jsonnetfmt"), "--test", *map(str, SOURCES)], capture_output=True, text=True
    )
    assert out.returncode == 0, "run `jsonnetfmt -i` on:\n" + out.stdout + out.stderr
