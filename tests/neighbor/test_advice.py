"""What `check` advises, for tables a test can choose (the kernel's own are the host's)."""

from hypothesis import given
from hypothesis import strategies as st
import pytest

from kube_scale_exporter.collectors.neighbor import (
    HEADROOM,
    advise,
    is_short,
    recommended_thresholds,
)
from kube_scale_exporter.netlink.neighbor import NeighborCount, NeighborTable

pytestmark = pytest.mark.unit


def table(family="ipv4", t1=128, t2=512, t3=1024, entries=0, fulls=0):
    return NeighborTable(family, t1, t2, t3, entries, {"table_fulls": fulls})


thresholds = st.tuples(
    st.integers(0, 1 << 20), st.integers(0, 1 << 20), st.integers(1, 1 << 20)
).map(sorted)


@given(need=st.integers(0, 1 << 22), current=thresholds)
def test_recommended_thresholds_fit_the_need_and_never_lower_a_setting(need, current):
    now = table(t1=current[0], t2=current[1], t3=current[2])
    t1, t2, t3 = recommended_thresholds(need, now)
    assert t1 <= t2 <= t3
    assert t3 >= now.thresh3 and t2 >= now.thresh2 and t1 >= now.thresh1
    assert not is_short(need, table(t1=t1, t2=t2, t3=t3))


def test_permanent_entries_do_not_count_against_gc_thresh3():
    """Cilium-style: 5,000 entries of which 4,900 PERMANENT in the host namespace is fine."""
    findings = advise({"ipv4": table(entries=5000)}, {"ipv4": NeighborCount(5000, 100)}, 0, True)
    assert [f.severity for f in findings] == ["info"]
    assert "at most 100 GC-eligible" in findings[0].summary


def test_severities():
    def severity(entries=0, peers=0, fulls=0, t3=1024):
        (f,) = advise({"ipv4": table(t3=t3, entries=entries, fulls=fulls)}, {}, peers, True)
        return f.severity

    assert severity(entries=100) == "info"
    assert severity(entries=400) == "warning"  # under gc_thresh2, but not HEADROOM x room
    assert severity(entries=600) == "warning"  # past gc_thresh2: forced GC churn
    assert severity(peers=1024) == "critical"  # cannot hold what it needs
    assert severity(entries=100, fulls=3) == "info"  # overflowed, but has room now
    assert severity(entries=600, fulls=3) == "critical"


def test_advice_gives_the_sysctl_lines_of_the_family_at_fault():
    findings = advise({"ipv4": table(), "ipv6": table("ipv6")}, {}, 3000, True)
    assert [f.severity for f in findings] == ["critical", "critical"]
    thresh3 = 1024 * -(-HEADROOM * 3000 // 1024)
    assert findings[1].advice.splitlines()[1:] == [
        f"net.ipv6.neigh.default.gc_thresh1 = {thresh3 // 4}",
        f"net.ipv6.neigh.default.gc_thresh2 = {thresh3 * 3 // 4}",
        f"net.ipv6.neigh.default.gc_thresh3 = {thresh3}",
    ]


def test_outside_the_host_namespace_check_says_so():
    findings = advise({"ipv4": table()}, {}, 0, in_host_netns=False)
    assert findings[0].severity == "warning" and "hostNetwork: true" in findings[0].advice
