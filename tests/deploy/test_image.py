"""The image: the Dockerfile's shape, and the image `make image` builds from it (testbed/image.py)
run as deploy/ runs its pods (testbed/container.py: read-only root, the image's numeric USER, no
capability), in both modes, against a real API server over TLS with a service account's
token and CA, as `check`, and behind a --web.config.file with bcrypt-hashed passwords.
"""

import json
import os
import re
import shutil

import bcrypt
import pytest
import requests

from kube_scale_exporter import __version__
from kube_scale_exporter.cli import DEFAULT_PORT
from kube_scale_exporter.containerd.ingestdir import DEFAULT_INGEST_DIR
from kube_scale_exporter.kube.config import SERVICE_ACCOUNT_DIR
from testbed import container, image
from testbed.kube_apiserver import apiserver_on_new_etcd
from testbed.metrics import wait_until
from testbed.ports import free_port
from testbed.procs import listening_ports
from tools import image_tree

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The budget for a DaemonSet image every node pulls (bench/results/image_size.md).
MAX_IMAGE_BYTES = 60_000_000
NODE = "node-a"


@pytest.mark.unit
def test_the_dockerfile_is_a_build_stage_then_the_trees_on_an_empty_base():
    build_steps, final = image.dockerfile()
    # On the build machine's platform, making the target architecture's files.
    assert build_steps[0] == ("FROM", "--platform=${BUILDPLATFORM} ${BUILD_IMAGE} AS build")
    globals_ = dict(image.stages(os.path.join(REPO, "Dockerfile"))[0][1])
    # Plain Debian bookworm: the stage's python3 is the bookworm python3.11 the image runs.
    assert globals_["ARG"] == "BUILD_IMAGE=docker.io/library/debian:bookworm-slim"
    assert final[0] == ("FROM", "scratch")
    assert ("ARG", "TARGETARCH") in build_steps
    *_, out, arch = [rest for word, rest in build_steps if word == "RUN"][-1].split()
    assert arch == "${TARGETARCH}"
    layers = [rest for word, rest in final if word == "COPY"]
    assert layers == [f"--from=build {out}/{layer}/ /" for layer in image_tree.LAYERS]
    steps = dict(final)
    assert steps["USER"] == image_tree.USER
    assert re.fullmatch(r"[1-9][0-9]*:[1-9][0-9]*", steps["USER"]), "numeric, non-root"
    assert steps["EXPOSE"] == str(DEFAULT_PORT)
    assert json.loads(steps["ENTRYPOINT"]) == [image_tree.PYTHON, "-m", "kube_scale_exporter"]
    assert "CMD" not in steps
    assert f"PYTHONPATH=/{image_tree.SITE}" in steps["ENV"].split()
    assert "PYTHONDONTWRITEBYTECODE=1" in steps["ENV"].split()
    assert dict([steps["ARG"].split("=")])["VERSION"] == __version__


@pytest.mark.unit
def test_the_context_holds_what_the_build_copies():
    ignore = open(os.path.join(REPO, ".dockerignore")).read().split()
    kept = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert set(image.image_inputs()) - {"Dockerfile"} == kept


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The image `make image` builds from this tree for this host's architecture (cached by
    its inputs: testbed/image.py), unpacked."""
    archive = image.build()
    root = tmp_path_factory.mktemp("image") / "root"
    config = container.unpack(archive, root)
    yield archive, root, config
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.integration
def test_the_image_is_three_layers_within_budget(built):
    archive, _, config = built
    _, layers = container.manifest(archive)
    assert len(layers) == len(image_tree.LAYERS)
    assert sum(len(data) for data in layers) <= MAX_IMAGE_BYTES
    assert config["config"]["User"] == image_tree.USER
    # The final stage's config, as buildah read it from the Dockerfile.
    assert config["config"]["Labels"]["org.opencontainers.image.version"] == __version__
    assert "PYTHONUNBUFFERED=1" in config["config"]["Env"]
    assert config["config"]["ExposedPorts"] == {f"{DEFAULT_PORT}/tcp": {}}


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    with apiserver_on_new_etcd(tmp_path_factory.mktemp("api")) as api:
        yield api


@pytest.fixture
def service_account(api, tmp_path):
    """The token and CA a pod's service account mount holds (admin's token: RBAC is
    tests/deploy's other files' concern), and the environment the kubelet sets."""
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(api.admin_token)
    shutil.copy(api.ca, sa / "ca.crt")
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(api.port)}
    return {str(sa): SERVICE_ACCOUNT_DIR}, env


def serve(built, args, *, env=None, volumes=None):
    _, root, config = built
    port = free_port()
    args = [*args, f"--web.listen-address=127.0.0.1:{port}"]
    proc = container.start(root, config, args, env=env, volumes=volumes)
    if not wait_until(lambda: port in listening_ports(proc.pid), 60):
        proc.kill()
        raise AssertionError(proc.communicate(timeout=10)[0].decode(errors="replace")[-2000:])
    return proc, f"http://127.0.0.1:{port}"


def stop(proc):
    proc.terminate()
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out.decode(errors="replace")[-2000:]


def scraped_until(url, line) -> str:
    """/metrics once it holds `line` (within 30 s), or the test fails showing the last one."""
    body = ""

    def holds():
        nonlocal body
        body = requests.get(f"{url}/metrics", timeout=10).text
        return line in body

    assert wait_until(holds, 30), body
    return body


def as_deployed(proc):
    with open(f"/proc/{proc.pid}/status") as f:
        status = dict(line.split(":", 1) for line in f)
    assert status["Uid"].split()[0] == image_tree.USER.split(":")[0]
    assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0
    with open(f"/proc/{proc.pid}/mountinfo") as f:
        root = next(line.split() for line in f if line.split()[4] == "/")
    assert "ro" in root[5].split(","), "the root filesystem is read-only"


def node_volumes(tmp_path):
    """containerd's ingest directory of an idle node (no download in progress), a kubelet
    config and containerd's config directory, where the imagepull component mounts them."""
    ingest = tmp_path / "ingest"
    ingest.mkdir()
    kubelet = tmp_path / "kubelet-config.yaml"
    kubelet.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "serializeImagePulls: false\nmaxParallelImagePulls: 3\n"
    )
    containerd = tmp_path / "containerd"
    containerd.mkdir()
    (containerd / "config.toml").write_text("version = 2\n")
    return {
        str(ingest): DEFAULT_INGEST_DIR,
        str(kubelet): "/var/lib/kubelet/config.yaml",
        str(containerd): "/etc/containerd",
    }


NODE_ARGS = [
    "--mode=node",
    "--collector.disable-defaults",
    "--collector.neighbor",
    "--collector.neighbor_gc",
    "--collector.imagepull",
    "--image-pull.source=ingest",
]


@pytest.mark.integration
def test_node_mode_with_imagepull_from_the_ingest_directory(built, service_account, tmp_path):
    volumes, env = service_account
    volumes = {**volumes, **node_volumes(tmp_path)}
    proc, url = serve(built, NODE_ARGS, env={**env, "NODE_NAME": NODE}, volumes=volumes)
    try:
        as_deployed(proc)
        body = scraped_until(url, 'kubescale_scrape_collector_success{collector="imagepull"} 1.0')
        for collector in ("neighbor", "neighbor_gc"):
            assert f'kubescale_scrape_collector_success{{collector="{collector}"}} 1.0' in body
        assert "kubescale_kubelet_max_parallel_image_pulls 3.0" in body
        # This node's pods, watched through the API server over TLS.
        scraped_until(url, 'kubescale_kube_watch_up{resource="pods"} 1.0')
    finally:
        stop(proc)


@pytest.mark.integration
def test_cluster_mode_watches_the_api_server_over_tls(built, service_account):
    volumes, env = service_account
    args = ["--mode=cluster", "--collector.disable-defaults", "--collector.imagepull_events"]
    proc, url = serve(built, args, env=env, volumes=volumes)
    try:
        as_deployed(proc)
        scraped_until(url, 'kubescale_scrape_collector_success{collector="imagepull_events"} 1.0')
        scraped_until(url, 'kubescale_kube_watch_up{resource="events"} 1.0')
    finally:
        stop(proc)


@pytest.mark.integration
def test_check_runs_in_the_image(built, tmp_path):
    _, root, config = built
    proc = container.start(
        root,
        config,
        ["check", "--mode=node", "--collector.disable-defaults", "--collector.neighbor"],
        volumes={},
    )
    out, _ = proc.communicate(timeout=120)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    assert "[neighbor]" in text and "0 collector(s) failed" in text, text


@pytest.mark.integration
def test_web_config_with_bcrypt_passwords(built, tmp_path):
    web = tmp_path / "web"
    web.mkdir()
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    (web / "web-config.yml").write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    args = ["--mode=node", "--collector.disable-defaults", "--collector.neighbor"]
    args += ["--web.config.file=/etc/kube-scale-exporter/web-config.yml"]
    proc, url = serve(built, args, volumes={str(web): "/etc/kube-scale-exporter"})
    try:
        as_deployed(proc)
        assert requests.get(f"{url}/metrics", timeout=10).status_code == 401
        r = requests.get(f"{url}/metrics", auth=("prometheus", "s3cret"), timeout=10)
        assert r.status_code == 200 and "kubescale_build_info{" in r.text
        assert (
            requests.get(f"{url}/metrics", auth=("prometheus", "x"), timeout=10).status_code == 401
        )
    finally:
        stop(proc)
