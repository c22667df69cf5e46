"""containerd's own CRI pull metrics, scraped beside this collector's series on the same
real pulls through the CRI (the kubelet's PullImage) of containerd 2.4.

containerd serves them at http://ADDRESS/v1/metrics once its config names an address:
`[plugins."io.containerd.server.v1.metrics"] address = "..."` (config version 4; `[metrics]
address` in versions 2 and 3, migrated). What each side sees that the other does not is in
docs/imagepull.md ("containerd's own pull metrics").
"""

import threading
import time

import pytest
import requests

from testbed.containerd_server import bin_dir
from testbed.metrics import parse_exposition, sample
from testbed.ports import free_port

from .test_containerd import MiB, fresh_repo, scrape, wait_for
from .test_ingest import cri_pull_quietly
from .test_pull_errors import cri_containerd, cri_pull, freezing

pytestmark = pytest.mark.integration

PREFIX = "containerd_cri_sandboxed_"
IN_PROGRESS = PREFIX + "in_progress_image_pulls_total"  # a gauge, despite its name
PULLS = PREFIX + "image_pulls_total"
THROUGHPUT = PREFIX + "image_pulling_throughput_mibps"  # 2.4; 2.3 has only the next one
OLD_THROUGHPUT = PREFIX + "image_pulling_throughput"  # 2.4: deprecated, same figures
KUBELET = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def theirs(address):
    """containerd's pull metrics now: {name: value} for the gauge, the counter by status
    and the throughput histograms' count and sum."""
    text = requests.get(f"http://{address}/v1/metrics", timeout=5).text
    out = {}
    for family in parse_exposition(text):
        for s in family.samples:
            if s.name.startswith(PREFIX) and "image_pull" in s.name and "le" not in s.labels:
                key = s.name + "".join(f"{{{k}={v}}}" for k, v in sorted(s.labels.items()))
                out[key] = s.value
    return out


@pytest.fixture
def frozen(registry):
    """A path to the registry that stops answering 256 KiB into a connection."""
    return freezing(registry.port)


@pytest.mark.parametrize("line", ["2.4"])
def test_containerd_pull_metrics_beside_ours(
    line, registry, proxy, frozen, make_collector, tmp_path
):
    metrics = f"127.0.0.1:{free_port()}"
    server = cri_containerd(
        bin_dir(line), [proxy.host, frozen, registry.host], timeout="5m", metrics_address=metrics
    )
    kubelet = tmp_path / "kubelet.yaml"
    kubelet.write_text(KUBELET)
    ours = make_collector(
        server.address,
        "--containerd.config",
        server.config,
        "--kubelet.config-file",
        str(kubelet),
        "--image-pull.stall-after",
        "2s",
    )
    pulls = []
    try:
        before = theirs(metrics)
        print(f"containerd {line} before any pull: {before}")
        assert before[IN_PROGRESS] == 0

        # A pull that downloads: 3 layers of 16 MiB at 4 MiB/s each.
        repo = fresh_repo()
        registry.push_image(repo, "v1", [16 * MiB] * 3)
        started = time.monotonic()
        pulls.append(
            threading.Thread(
                target=cri_pull_quietly, args=(server, f"{proxy.host}/{repo}:v1"), daemon=True
            )
        )
        pulls[-1].start()
        moving = wait_for(
            ours,
            lambda f: sample(f, "kubescale_image_pull_downloaded_bytes") > 4 * MiB,
            20,
            "downloading",
        )
        during = theirs(metrics)
        print(f"containerd {line} during the pull: {during}")
        assert during[IN_PROGRESS] == 1
        assert sample(moving, "kubescale_image_pulls_in_progress") == 1
        assert sample(moving, "kubescale_image_pull_expected_bytes") >= 48 * MiB
        pulls[-1].join(60)
        elapsed = time.monotonic() - started
        after = theirs(metrics)
        print(f"containerd {line} after it ({elapsed:.1f} s): {after}")
        assert after[IN_PROGRESS] == 0
        assert after[PULLS + "{status=success}"] == before.get(PULLS + "{status=success}", 0) + 1
        for histogram in (THROUGHPUT, OLD_THROUGHPUT):
            assert after[histogram + "_count"] == before[histogram + "_count"] + 1
        # MiB fetched over the whole pull: a bit under 48 MiB / the time it took.
        mibps = after[THROUGHPUT + "_sum"] - before[THROUGHPUT + "_sum"]
        assert 48 / elapsed / 1.5 < mibps < 48 / elapsed * 1.5, (mibps, elapsed)
        done = scrape(ours)
        assert sample(done, "kubescale_image_pulls_in_progress") == 0

        # A pull that fails (a tag the registry does not have): counted there, not here.
        cri_pull(server, f"{registry.host}/{repo}:missing", timeout=30)
        failed = theirs(metrics)
        assert failed[PULLS + "{status=failure}"] == after.get(PULLS + "{status=failure}", 0) + 1

        # A pull that stops moving mid-layer: in progress there, and nothing more; stalled here.
        repo = fresh_repo()
        registry.push_image(repo, "v1", [8 * MiB])
        pulls.append(
            threading.Thread(
                target=cri_pull_quietly, args=(server, f"{frozen}/{repo}:v1"), daemon=True
            )
        )
        pulls[-1].start()
        stalled = wait_for(
            ours, lambda f: sample(f, "kubescale_image_pull_stalled") == 1, 30, "stalled"
        )
        stuck = theirs(metrics)
        print(f"containerd {line} with a stalled pull: {stuck}")
        assert stuck[IN_PROGRESS] == 1
        assert {k: v for k, v in stuck.items() if k != IN_PROGRESS} == {
            k: v for k, v in failed.items() if k != IN_PROGRESS
        }
        assert sample(stalled, "kubescale_image_pulls_in_progress") == 1
        assert sample(stalled, "kubescale_image_pull_oldest_seconds") >= 2
    finally:
        server.wipe()
        for pull in pulls:
            pull.join(30)
