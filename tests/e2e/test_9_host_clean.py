"""`down` restores the host: no process, bridge, iptables chain, mount, cgroup, sysctl or
file of the cluster remains (testbed.host.snapshot before `up` vs after `down`)."""

import pathlib
import time

from .conftest import TIMINGS


def running(pid):
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_down_leaves_host_clean(cluster):
    t = time.monotonic()
    pids = dict(cluster.load()["pids"])
    remains = cluster.down()
    TIMINGS["down"] = time.monotonic() - t
    assert remains == [], remains
    alive = [name for name, pid in pids.items() if running(pid)]
    assert not alive, alive
