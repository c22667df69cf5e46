"""The image as a user builds and pushes it: `make image` (Debian's buildah building
./Dockerfile) for amd64 and arm64, each image started the way deploy/ runs its pods
(testbed/container.py: read-only root, the image's USER, no capability), the arm64 one
through qemu-user on this amd64 host, serving /metrics and stopping on SIGTERM; then
`make image-push` to a real registry (Debian's docker-registry on a free loopback port)
and the manifest list read back from it with both architectures, every digest checked, and
pulled by a real containerd for both platforms.

The build itself runs in .ci/setup.d/45-image.sh (testbed/image.py caches it by a hash of
the Dockerfile's inputs); a test that finds it missing builds it, which takes minutes.
"""

import hashlib
import json
import pathlib
import shutil
import signal
import struct
import time

import pytest
import requests

from kube_scale_exporter import __version__
from kube_scale_exporter.containerd.ingestdir import DEFAULT_INGEST_DIR
from testbed import container, image
from testbed.containerd_server import ContainerdServer
from testbed.metrics import wait_until
from testbed.ports import free_port
from testbed.procs import listening_ports
from testbed.registry_server import RegistryServer
from tools import image_tree

pytestmark = pytest.mark.integration

# ELF e_machine of each architecture's binaries, and the name Go and OCI give it.
ELF_MACHINE = {"amd64": 0x3E, "arm64": 0xB7}
# The budget for a DaemonSet image every node pulls (tests/deploy/test_image.py).
MAX_IMAGE_BYTES = 60_000_000
LIST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)


def elf_machine(path: pathlib.Path) -> int:
    with open(path, "rb") as f:
        header = f.read(20)
    assert header[:4] == b"\x7fELF", f"{path} is no ELF binary"
    return struct.unpack_from("<H", header, 18)[0]


def in_root(root: pathlib.Path, path: str) -> pathlib.Path:
    """`path` as the image sees it, its symlinks resolved inside `root`."""
    resolved = root / path.lstrip("/")
    for _ in range(10):
        if not resolved.is_symlink():
            return resolved
        target = resolved.readlink()
        resolved = (
            root / str(target).lstrip("/") if target.is_absolute() else (resolved.parent / target)
        )
    raise AssertionError(f"{path}: too many links")


@pytest.fixture(scope="module", params=image.ARCHS)
def unpacked(request, tmp_path_factory):
    arch = request.param
    archive = image.build(arch)
    root = tmp_path_factory.mktemp(f"image-{arch}") / "root"
    config = container.unpack(archive, root)
    yield arch, archive, root, config
    shutil.rmtree(root, ignore_errors=True)


def test_each_image_is_its_architecture_within_budget(unpacked):
    arch, archive, root, config = unpacked
    assert config["architecture"] == arch and config["os"] == "linux"
    entrypoint = config["config"]["Entrypoint"]
    assert elf_machine(in_root(root, entrypoint[0])) == ELF_MACHINE[arch]
    # The C extensions came from the wheels for this architecture, not the host's.
    (yaml_ext,) = (root / "usr/lib/kube-scale-exporter/yaml").glob("_yaml.cpython-311-*.so")
    assert elf_machine(yaml_ext) == ELF_MACHINE[arch]
    _, layers = container.manifest(archive)
    assert len(layers) == len(image_tree.LAYERS), "one layer per COPY --from=build"
    size = sum(len(data) for data in layers)
    print(f"{arch}: {len(layers)} layers, {size / 1e6:.1f} MB uncompressed")
    assert size <= MAX_IMAGE_BYTES
    labels = config["config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == __version__


def node_files(tmp_path) -> dict:
    """A node's kubelet config, containerd's config directory and its idle ingest directory,
    mounted where deploy/'s imagepull component mounts them. imagepull reads files only:
    under qemu-user the neighbor collectors' netlink requests fail with EOPNOTSUPP (qemu
    translates few NETLINK_ROUTE messages), which says nothing of the image."""
    kubelet = tmp_path / "kubelet-config.yaml"
    kubelet.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "serializeImagePulls: false\nmaxParallelImagePulls: 3\n"
    )
    containerd = tmp_path / "containerd"
    containerd.mkdir()
    (containerd / "config.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  max_concurrent_downloads = 5\n'
    )
    ingest = tmp_path / "ingest"
    ingest.mkdir()
    return {
        str(kubelet): "/var/lib/kubelet/config.yaml",
        str(containerd): "/etc/containerd",
        str(ingest): DEFAULT_INGEST_DIR,
    }


def test_each_image_serves_metrics_and_stops_on_sigterm(unpacked, tmp_path):
    arch, _, root, config = unpacked
    port = free_port()
    args = ["--collector.disable-defaults", "--collector.imagepull", "--image-pull.source=ingest"]
    args += [f"--web.listen-address=127.0.0.1:{port}"]
    start = time.monotonic()
    proc = container.start(
        root, config, args, env={"NODE_NAME": "node-a"}, volumes=node_files(tmp_path)
    )
    try:
        # Under qemu-user the interpreter starts several times slower than natively.
        if not wait_until(lambda: port in listening_ports(proc.pid), 120, interval=0.1):
            proc.kill()
            raise AssertionError(proc.communicate(timeout=10)[0].decode(errors="replace"))
        listening = time.monotonic() - start
        # The kernel hands an aarch64 binary to qemu-aarch64-static (binfmt_misc): that is
        # the process's executable, the image's own interpreter is what it runs.
        exe = pathlib.Path(f"/proc/{proc.pid}/exe").resolve().name
        assert (exe == "qemu-aarch64-static") == (arch == "arm64"), exe
        body = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
        build_info = [line for line in body.splitlines() if line.startswith("kubescale_build_info")]
        assert len(build_info) == 1, body[:2000]
        assert f'version="{__version__}"' in build_info[0]
        assert 'python_version="3.11.' in build_info[0]
        assert 'kubescale_scrape_collector_success{collector="imagepull"} 1.0' in body, body
        assert "kubescale_kubelet_max_parallel_image_pulls 3.0" in body
        assert "kubescale_containerd_max_concurrent_downloads 5.0" in body
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        stopped = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == 0, out.decode(errors="replace")[-2000:]
    print(
        f"{arch} ({exe}): listening {listening:.2f}s after start, exited {stopped:.2f}s after SIGTERM"
    )


@pytest.fixture
def registry(tmp_path):
    server = RegistryServer(tmp_path / "registry").start()
    yield server
    server.stop()


def get(url, accept, digest=None) -> requests.Response:
    response = requests.get(url, headers={"Accept": ", ".join(accept)}, timeout=60)
    response.raise_for_status()
    if digest:
        assert "sha256:" + hashlib.sha256(response.content).hexdigest() == digest, url
    return response


@pytest.fixture
def containerd(tmp_path):
    server = ContainerdServer(tmp_path / "containerd").start()
    yield server
    server.stop()


def test_make_image_push_sends_both_architectures_as_one_list(registry, containerd):
    target = f"{registry.host}/team/kube-scale-exporter:{__version__}"
    out = image.push(target)
    print(out[-500:])

    base = f"{registry.url}/v2/team/kube-scale-exporter"
    index = get(f"{base}/manifests/{__version__}", LIST_TYPES)
    assert index.headers["Content-Type"].split(";")[0] in LIST_TYPES
    platforms = {}
    for entry in index.json()["manifests"]:
        platforms[entry["platform"]["architecture"]] = entry
        assert entry["platform"]["os"] == "linux"
    assert sorted(platforms) == sorted(image.ARCHS)
    for arch, entry in platforms.items():
        manifest = get(f"{base}/manifests/{entry['digest']}", MANIFEST_TYPES, entry["digest"])
        doc = manifest.json()
        config = json.loads(
            get(f"{base}/blobs/{doc['config']['digest']}", ["*/*"], doc["config"]["digest"]).content
        )
        assert config["architecture"] == arch
        assert len(doc["layers"]) == len(image_tree.LAYERS)
        for layer in doc["layers"]:
            blob = requests.head(f"{base}/blobs/{layer['digest']}", timeout=60)
            assert blob.status_code == 200 and int(blob.headers["Content-Length"]) == layer["size"]

    # A real client: containerd pulls the list for both platforms and holds each config.
    containerd.ctr("images", "pull", "--plain-http", "--all-platforms", target, timeout=600)
    for arch, entry in platforms.items():
        doc = json.loads(containerd.ctr("content", "get", entry["digest"]).stdout)
        config = json.loads(containerd.ctr("content", "get", doc["config"]["digest"]).stdout)
        assert config["architecture"] == arch
