"""The ingest directory against the socket, on the same live pulls, on containerd 1.7, 2.3
and 2.4 (through a throttling proxy; a client killed mid-pull makes a stalled one).

No API server: the pods' part of the ingest source (presence, queued) is in
test_parts.py; here the containerd side of both sources is held to the same figures.
"""

import json
import os
import signal
import subprocess
import tempfile
import threading
import time

import pytest

from kube_scale_exporter.containerd import grpc_h2
from kube_scale_exporter.containerd.client import ContainerdClient
from kube_scale_exporter.containerd.ingestdir import IngestDir
from testbed.containerd_server import VERSIONS, ContainerdServer, bin_dir
from testbed.metrics import sample
from testbed.procs import Proc

from .test_containerd import MiB, fresh_repo, scrape, wait_for
from .test_pull_errors import PULL_IMAGE, _bytes_field, cri_containerd

pytestmark = pytest.mark.integration

# Debian's interpreter: one under /root (0700) cannot be run as uid 65534.
SYSTEM_PYTHON = "/usr/bin/python3"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIGURES = (
    "kubescale_image_pulls_in_progress",
    "kubescale_image_pull_stalled",
    "kubescale_image_pull_downloaded_bytes",
    "kubescale_image_pull_expected_bytes",
)
# The client drives a pull in 1.x; in 2.x `ctr images pull` goes through the daemon's
# transfer service and `content fetch` stays in the client.
CLIENTS = {"fetch": ("content", "fetch"), "pull": ("images", "pull")}


@pytest.fixture(params=VERSIONS)
def line(request):
    """Each containerd line by name (tests/imagepull/conftest.py leaves these out when
    KSE_CONTAINERD_DIR is set)."""
    return request.param


@pytest.fixture
def versioned(line):
    path = tempfile.mkdtemp(prefix="cv-", dir="/tmp")
    server = ContainerdServer(path, bin_dir=bin_dir(line)).start()
    yield server
    server.wipe()


def ingest_dir(server):
    return os.path.join(server.workdir, "root", "io.containerd.content.v1.content", "ingest")


# A kubelet with no bound on parallel pulls: the ingest source's own estimate is tested
# (and never the host's /var/lib/kubelet/config.yaml, when it has one).
PARALLEL_KUBELET = (
    "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
    "serializeImagePulls: false\n"
)


def both(make_collector, server, *flags):
    """(socket collector, ingest collector) of one containerd, under a kubelet that pulls
    in parallel without a limit."""
    kubelet = os.path.join(server.workdir, "kubelet.yaml")
    with open(kubelet, "w") as f:
        f.write(PARALLEL_KUBELET)
    flags = ("--kubelet.config-file", kubelet, *flags)
    socket = make_collector(server.address, *flags)
    ingest = make_collector(
        server.address,
        "--image-pull.source=ingest",
        "--containerd.ingest-dir",
        ingest_dir(server),
        *flags,
    )
    return socket, ingest


def start(server, ref, log, client="fetch"):
    return Proc(server.ctr_argv(*CLIENTS[client], "--plain-http", ref), log)


def kill(proc):
    os.kill(proc.pid, signal.SIGKILL)
    proc.stop()


def frozen(server, timeout=10.0):
    """The ingests once no byte moved for a second (the 2.x transfer service writes on
    briefly after its client died)."""
    client = ContainerdClient(server.address, server.namespace, 5)
    deadline = time.monotonic() + timeout
    last = client.ingests()
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = client.ingests()
        if [(i.ref, i.offset) for i in now] == [(i.ref, i.offset) for i in last]:
            return now
        last = now
    raise AssertionError(f"ingests still moving after {timeout}s: {last}")


def moving(server, layers, timeout=20.0):
    """Wait until `layers` layer ingests each hold a MiB or more."""
    client = ContainerdClient(server.address, server.namespace, 5)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(1 for i in client.ingests() if i.kind == "layer" and i.offset >= MiB) >= layers:
            return
        time.sleep(0.2)
    raise AssertionError(f"not {layers} layers downloading within {timeout}s")


def two_images(server, registry, proxy, workdir, sizes):
    """Two fresh images of layers of `sizes`, fetched at once: (their layer sizes, pulls)."""
    repos = [fresh_repo(), fresh_repo()]
    layers = [n for r in repos for n in registry.push_image(r, "v1", sizes)["layer_sizes"]]
    return layers, [start(server, f"{proxy.host}/{r}:v1", f"{workdir}/{r}.log") for r in repos]


def every_layer_downloading(collector, layers):
    """The families once every one of `layers`, and nothing else, is being written."""
    return wait_for(
        collector,
        lambda f: sample(f, "kubescale_image_pull_expected_bytes") == sum(layers),
        20,
        f"{len(layers)} layers downloading",
    )


def figures(collector):
    families = scrape(collector)
    return {name: sample(families, name) for name in FIGURES}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_the_directory_holds_what_list_statuses_answers(
    versioned, registry, proxy, workdir, client
):
    repo = fresh_repo()
    registry.push_image(repo, "v1", [24 * MiB, 24 * MiB])
    pull = start(versioned, f"{proxy.host}/{repo}:v1", f"{workdir}/{repo}.log", client)
    try:
        moving(versioned, 2)
    finally:
        kill(pull)
    listed, read = frozen(versioned), None
    for _ in range(5):
        # Read between two equal listings: nothing moved while it read.
        read = IngestDir(ingest_dir(versioned), versioned.namespace).ingests()
        again = ContainerdClient(versioned.address, versioned.namespace, 5).ingests()
        if again == listed:
            break
        listed = again
    listed = sorted(listed, key=lambda i: i.ref)  # ours come sorted, containerd's by key
    assert [(i.ref, i.offset, i.total) for i in read] == [
        (i.ref, i.offset, i.total) for i in listed
    ]
    layers = [i for i in read if i.kind == "layer"]
    assert len(layers) == 2 and all(0 < i.offset < i.total for i in layers)
    for mine, theirs in zip(read, listed, strict=True):
        # containerd's answer is the later of updatedat and data's mtime, as ours.
        assert mine.started_at == pytest.approx(theirs.started_at, abs=1e-6)
        assert mine.updated_at == pytest.approx(theirs.updated_at, abs=1e-6)
    # Another namespace's ingests are not this one's.
    assert IngestDir(ingest_dir(versioned), "default").ingests() == []


def test_a_reader_without_root_and_without_groups_reads_a_read_only_mount(
    versioned, registry, proxy, workdir
):
    """As the kubelet mounts a hostPath: the directory bind-mounted read-only (its parents,
    containerd's 0700 root among them, are not on the path), read as uid 65534 with no
    supplementary group."""
    repo = fresh_repo()
    registry.push_image(repo, "v1", [24 * MiB])
    pull = start(versioned, f"{proxy.host}/{repo}:v1", f"{workdir}/{repo}.log")
    try:
        moving(versioned, 1)
    finally:
        kill(pull)
    listed = frozen(versioned)
    root = os.path.join(versioned.workdir, "root")
    assert os.stat(root).st_mode & 0o777 == 0o700
    mount = tempfile.mkdtemp(prefix="mnt-", dir="/tmp")
    os.chmod(mount, 0o755)
    program = (
        "import json, os, sys\n"
        "from kube_scale_exporter.containerd.ingestdir import IngestDir\n"
        "found = IngestDir(sys.argv[1], 'k8s.io').ingests()\n"
        "try:\n"
        "    open(os.path.join(sys.argv[1], 'x'), 'w')\n"
        "    wrote = True\n"
        "except OSError:\n"
        "    wrote = False\n"
        "print(json.dumps({'id': [os.getuid(), os.getgid(), os.getgroups()], 'wrote': wrote,"
        " 'ingests': [[i.ref, i.offset, i.total] for i in found]}))\n"
    )
    script = (
        f'mount -n --bind -o ro "$1" "$2" && exec setpriv --reuid=65534 --regid=65534 '
        f'--clear-groups env PYTHONPATH={REPO} {SYSTEM_PYTHON} -c "$3" "$2"'
    )
    try:
        done = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]
            + [ingest_dir(versioned), mount, program],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    finally:
        os.rmdir(mount)
    seen = json.loads(done.stdout)
    assert seen["id"] == [65534, 65534, []]
    assert seen["wrote"] is False
    assert seen["ingests"] == [
        [i.ref, i.offset, i.total] for i in sorted(listed, key=lambda i: i.ref)
    ]


def test_same_figures_for_two_images_then_a_stalled_pull(
    versioned, registry, proxy, make_collector, workdir
):
    socket, ingest = both(make_collector, versioned, "--image-pull.stall-after", "2s")
    layers, pulls = two_images(versioned, registry, proxy, workdir, [8 * MiB] * 3)
    try:
        # Three layers of each image at once: both sources see two images.
        seen = every_layer_downloading(socket, layers)
        from_dir = figures(ingest)
        assert sample(seen, "kubescale_image_pulls_in_progress") == 2
        assert from_dir["kubescale_image_pulls_in_progress"] == 2
        assert from_dir["kubescale_image_pull_stalled"] == 0
        assert from_dir["kubescale_image_pull_expected_bytes"] == sum(layers)
        for p in pulls:
            assert p.popen.wait(60) == 0, p.log_tail()
    finally:
        for p in pulls:
            p.stop()
    assert figures(socket) == figures(ingest) == dict.fromkeys(FIGURES, 0)

    repo = fresh_repo()
    registry.push_image(repo, "v1", [32 * MiB])
    pull = start(versioned, f"{proxy.host}/{repo}:v1", f"{workdir}/{repo}.log")
    try:
        wait_for(
            ingest,
            lambda f: sample(f, "kubescale_image_pull_downloaded_bytes") > 2 * MiB,
            20,
            "downloading",
        )
    finally:
        kill(pull)
    frozen(versioned)
    stalled = wait_for(
        ingest, lambda f: sample(f, "kubescale_image_pull_stalled") == 1, 10, "stalled"
    )
    assert figures(socket) == {name: sample(stalled, name) for name in FIGURES}
    assert sample(stalled, "kubescale_image_pulls_in_progress") == 1
    assert 0 < sample(stalled, "kubescale_image_pull_downloaded_bytes") < 32 * MiB
    # The socket's pull began when its manifest was committed, just before the layer.
    oldest = "kubescale_image_pull_oldest_seconds"
    assert sample(scrape(ingest), oldest) == pytest.approx(sample(scrape(socket), oldest), abs=1.0)


def test_two_small_images_at_once_count_as_one_without_the_manifests(
    versioned, registry, proxy, make_collector, workdir
):
    """The documented difference: one layer each, fewer than the 3 download slots of a
    pull, so the ingest source cannot tell them from one image's layers."""
    socket, ingest = both(make_collector, versioned)
    layers, pulls = two_images(versioned, registry, proxy, workdir, [16 * MiB])
    try:
        seen = every_layer_downloading(socket, layers)
        from_dir = figures(ingest)
        assert sample(seen, "kubescale_image_pulls_in_progress") == 2
        assert from_dir["kubescale_image_pulls_in_progress"] == 1
        assert from_dir["kubescale_image_pull_expected_bytes"] == sum(layers)
    finally:
        for p in pulls:
            p.stop()


def test_a_cri_pull_is_one_pull_under_a_kubelet_that_serializes(
    line, registry, proxy, make_collector, workdir, tmp_path
):
    """The CRI pulls 3 layers of an image at once on 1.7 (max_concurrent_downloads); 2.x's
    transfer service opens all 6 ingests at once and writes 3: under a kubelet with
    unbounded parallel pulls the ingest source counts 2.x's as two pulls; the kubelet's
    serialized pulls (its default) bound it. The 3 waiting at offset 0 are not stalled.
    Each line's config is the newest version it writes (2 on 1.7, 4 on 2.3 and 2.4)."""
    server = cri_containerd(bin_dir(line), [proxy.host], timeout="5m")
    kubelet = tmp_path / "kubelet.yaml"
    kubelet.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
    repo = fresh_repo()
    # 32 MiB at the proxy's 4 MiB/s: the first three layers take 8 s.
    registry.push_image(repo, "v1", [32 * MiB] * 6)
    image = f"{proxy.host}/{repo}:v1"
    pull = threading.Thread(target=cri_pull_quietly, args=(server, image), daemon=True)
    try:
        socket, bare = both(make_collector, server, "--image-pull.stall-after", "3s")
        serial = make_collector(
            server.address,
            "--image-pull.source=ingest",
            "--containerd.ingest-dir",
            ingest_dir(server),
            "--kubelet.config-file",
            str(kubelet),
            "--image-pull.stall-after",
            "3s",
        )
        pull.start()
        moving(server, 3)
        opened = len(ContainerdClient(server.address, "k8s.io", 5).ingests())
        assert opened == (6 if server.release[0] == 2 else 3)
        assert figures(socket)["kubescale_image_pulls_in_progress"] == 1
        assert figures(serial)["kubescale_image_pulls_in_progress"] == 1
        assert figures(bare)["kubescale_image_pulls_in_progress"] == opened // 3
        assert sample(scrape(serial), "kubescale_kubelet_serialize_image_pulls") == 1
        time.sleep(3.5)  # past --image-pull.stall-after, the last 3 layers not begun yet
        assert [figures(c)["kubescale_image_pull_stalled"] for c in (socket, bare, serial)] == [
            0,
            0,
            0,
        ]
    finally:
        server.wipe()
        pull.join(30)


def cri_pull_quietly(server, image):
    """PullImage until it ends; the test stops containerd under it."""
    request = _bytes_field(1, _bytes_field(1, image.encode()))
    try:
        grpc_h2.call(
            server.address, PULL_IMAGE, request, 120, (("containerd-namespace", "k8s.io"),)
        )
    except grpc_h2.GrpcError:
        pass
