"""A whole-image pull with `ctr images pull`, as the kubelet's pulls go through containerd.

On containerd 2.x `ctr images pull` goes through the daemon's transfer service (the pull runs
inside containerd, not in the client, unless --local); on 1.x the client drives it. Either
way the collector must see one pull in progress with its bytes moving, then none. It runs
on the default containerd, 2.3 (and 2.4 in `make test-containerd-2.4`).
"""

import pytest

from testbed.metrics import sample
from testbed.procs import Proc

from .test_containerd import MiB, fresh_repo, grown, scrape, wait_for_layer

pytestmark = pytest.mark.integration


def test_images_pull_seen_while_downloading(containerd, registry, proxy, make_collector, workdir):
    repo = fresh_repo()
    image = registry.push_image(repo, "v1", [16 * MiB])
    c = make_collector(containerd.address)
    ref = f"{proxy.host}/{repo}:v1"
    pull = Proc(containerd.ctr_argv("images", "pull", "--plain-http", ref), f"{workdir}/{repo}.log")
    try:
        first = wait_for_layer(c, image, 15)
        later = grown(c, first)
        assert sample(later, "kubescale_image_pull_stalled") == 0
        assert pull.popen.wait(60) == 0, pull.log_tail()
    finally:
        pull.stop()
    done = scrape(c)
    assert sample(done, "kubescale_image_pulls_in_progress") == 0
    assert sample(done, "kubescale_image_pull_oldest_seconds") == 0
    assert ref in containerd.ctr("images", "ls", "-q").stdout
