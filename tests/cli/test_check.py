"""`check` prints what it found and exits 1 when something needs changing."""

import io

import pytest

from kube_scale_exporter.check import run_check
from kube_scale_exporter.registry import Finding

pytestmark = pytest.mark.unit


def test_nothing_to_change_exits_0(scripted):
    out = io.StringIO()
    code = run_check([scripted("a", findings=[Finding("info", "all fine here")])], 2, out)
    assert code == 0
    assert "[a]" in out.getvalue() and "all fine here" in out.getvalue()


def test_a_finding_prints_its_advice_and_exits_1(scripted):
    advice = "sysctl -w net.ipv4.neigh.default.gc_thresh3=16384"
    out = io.StringIO()
    code = run_check([scripted("a", findings=[Finding("warning", "too small", advice)])], 2, out)
    assert code == 1
    assert "  WARNING  too small\n" in out.getvalue()
    assert f"             {advice}\n" in out.getvalue()


def test_a_failing_collector_is_named_with_its_error_and_exits_1(scripted):
    bad = scripted("bad")
    bad.error = PermissionError("netlink refused")
    out = io.StringIO()
    assert run_check([bad, scripted("good")], 2, out) == 1
    assert (
        "[bad]\n  FAILED   the collector failed: PermissionError: netlink refused\n"
        in out.getvalue()
    )
    assert "[good]\n           nothing to report\n" in out.getvalue()
