"""`down` restores the host: no process, bridge, iptables chain, mount, cgroup, sysctl or
file of the cluster remains (testbed.cluster.snapshot before `up` vs after `down`)."""
import time

from .conftest import TIMINGS


def test_down_leaves_host_clean(cluster):
    t = time.monotonic()
    pids = dict(cluster.load()["pids"])
    remains = cluster.down()
    TIMINGS["down"] = time.monotonic() - t
    assert remains == [], remains
    import os
    alive = [n for n, pid in pids.items() if os.path.exists(f"/proc/{pid}")
             and open(f"/proc/{pid}/stat").read().split(") ")[1][0] != "Z"]
    assert not alive, alive
