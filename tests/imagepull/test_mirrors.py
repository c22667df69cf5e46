"""Registry mirrors on real containerd: where a CRI pull really went, against the verdict
the exporter reads from the config and the host directories.

For each containerd line (1.7.24, 2.1.9, 2.3.7, 2.4.2) and each setting of the field
notes' table, one case: a fresh image on an upstream docker-registry, the same bytes on a
mirror registry (or a pull-through cache of the upstream, `proxy.remoteurl`), a hosts.toml
in /etc/containerd/certs.d (written by hand, or by the real `spegel configuration`),
containerd with its CRI in a mount namespace of its own (/run a tmpfs, /etc an overlay
whose two certs.d roots are the test's), and `crictl pull` through the CRI. Where the pull
went is read from the two registries' access logs (requests with containerd's user agent);
the exporter's verdict comes from containerd/config.py and containerd/hostsdir.py reading
the same files, the version from the binary's Go build info (as `--containerd.binary`).

docs/imagepull.md holds the measured table, one row per case: each case fails when its
row there differs from what it measured (KSE_UPDATE_DOCS=1 writes it), and a unit test
when the doc holds a row no case measures.
"""

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import requests

from kube_scale_exporter.containerd import config, hostsdir
from kube_scale_exporter.containerd.buildinfo import read_version
from testbed import builds
from testbed.doctable import DocTable
from testbed.containerd_server import ContainerdServer, bin_dir, newest_config_version
from testbed.registry_server import RegistryServer

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "imagepull.md"
CERTS = hostsdir.DEFAULT_ROOTS[0]
COLON = hostsdir.DEFAULT_CONFIG_PATH

# Each setting: (what the table says, the config_path written or None, CRI images keys).
SETTINGS = {
    "one_dir": (f'config_path = "{CERTS}"', CERTS, {}),
    "colon": (f'config_path = "{COLON}"', COLON, {}),
    "colon_local": (
        f'config_path = "{COLON}", use_local_image_pull = true',
        COLON,
        {"use_local_image_pull": "true"},
    ),
    "colon_fallback": (
        f'config_path = "{COLON}", max_concurrent_downloads = 5 (a fallback)',
        COLON,
        {"max_concurrent_downloads": "5"},
    ),
    "unset": ("config_path not set", None, {}),
    "unset_local": (
        "config_path not set, use_local_image_pull = true",
        None,
        {"use_local_image_pull": "true"},
    ),
}
# 1.x has neither use_local_image_pull nor a transfer service to fall back from.
LINE_SETTINGS = {
    "1.7": ("one_dir", "colon", "unset"),
    "2.1": tuple(SETTINGS),
    "2.3": tuple(SETTINGS),
    "2.4": tuple(SETTINGS),
}
# (line, setting, mirror): mirror is `plain` (the same bytes pushed there), `cache` (a
# pull-through cache of the upstream) or `spegel` (the plain mirror, hosts.toml written by
# `spegel configuration`).
CASES = [(line, s, "plain") for line, settings in LINE_SETTINGS.items() for s in settings] + [
    ("2.3", "one_dir", "cache"),
    ("2.4", "one_dir", "spegel"),
    ("2.4", "unset", "spegel"),
]


def case_id(case):
    return "-".join(case)


def row_key(line_text: str) -> tuple[str, str, str]:
    cells = [c.strip() for c in line_text.strip().strip("|").split("|")]
    return cells[0], cells[1], cells[2]


def table_key(line, setting, mirror):
    kind = {"plain": "mirror", "cache": "pull-through cache", "spegel": "mirror, by Spegel"}
    return (line, SETTINGS[setting][0], kind[mirror])


ROW_ORDER = [table_key(*c) for c in CASES]
TABLE = DocTable(DOC, "mirror-matrix", row_key)


def copy_image(src: RegistryServer, dst: RegistryServer, repo: str, tag: str) -> None:
    """The same manifest and blobs on `dst` (a plain mirror holds what upstream holds)."""
    accept = {"Accept": "application/vnd.oci.image.manifest.v1+json"}
    manifest = requests.get(f"{src.url}/v2/{repo}/manifests/{tag}", headers=accept, timeout=30)
    manifest.raise_for_status()
    body = manifest.json()
    for blob in [body["config"], *body["layers"]]:
        data = requests.get(f"{src.url}/v2/{repo}/blobs/{blob['digest']}", timeout=30)
        data.raise_for_status()
        dst.push_blob(repo, data.content)
    put = requests.put(
        f"{dst.url}/v2/{repo}/manifests/{tag}",
        data=manifest.content,
        headers={"Content-Type": body["mediaType"]},
        timeout=30,
    )
    put.raise_for_status()


def hosts_toml(upstream: RegistryServer, mirror: RegistryServer) -> str:
    return (
        f'server = "{upstream.url}"\n\n[host."{mirror.url}"]\n'
        '  capabilities = ["pull", "resolve"]\n'
    )


def cri_config(line: str, setting: str, version: int) -> str:
    _said, config_path, images = SETTINGS[setting]
    table = (
        '[plugins."io.containerd.grpc.v1.cri"]'
        if version == 2
        else '[plugins."io.containerd.cri.v1.images"]'
    )
    text = ""
    if images:
        text += table + "\n" + "".join(f"  {k} = {v}\n" for k, v in images.items())
    if config_path is not None:
        text += f'{table[:-1]}.registry]\n  config_path = "{config_path}"\n'
    return text


@pytest.fixture(scope="module")
def upstream(workdir):
    server = RegistryServer(f"{workdir}/upstream").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def mirror(workdir):
    server = RegistryServer(f"{workdir}/mirror").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cache(workdir, upstream):
    server = RegistryServer(f"{workdir}/cache", proxy_remote=upstream.url).start()
    yield server
    server.stop()


def measured_row(key, went, found, settings, version_text) -> str:
    line, said, kind = key
    verdict = f"{found.verdict} ({found.reason})"
    how = f"{settings.pull_path} pull ({settings.pull_reason})"
    return f"| {line} | {said} | {kind} | {went} | {verdict}, {how} | {version_text} |"


@pytest.mark.integration
@pytest.mark.parametrize(("line", "setting", "kind"), CASES, ids=map(case_id, CASES))
def test_the_verdict_is_where_the_pull_went(line, setting, kind, upstream, mirror, cache):
    case = (line, setting, kind)
    directory = bin_dir(line)
    binary = os.path.join(directory, "containerd")
    print(builds.version_line(binary), "|", builds.version_line(builds.crictl_binary()))
    version = newest_config_version(directory)
    repo = f"mx/{line.replace('.', '')}-{setting}-{kind}".replace("_", "-")
    upstream.push_image(repo, "v1", [4096])
    target = cache if kind == "cache" else mirror
    if kind != "cache":
        copy_image(upstream, mirror, repo, "v1")
    work = tempfile.mkdtemp(prefix="mx-", dir="/tmp")
    etc = f"{work}/etc"
    registry_dir = f"{etc}/containerd/certs.d/{upstream.host}"
    try:
        os.makedirs(f"{etc}/docker/certs.d", exist_ok=True)
        if kind == "spegel":
            spegel = subprocess.run(
                [
                    builds.spegel_binary(),
                    "configuration",
                    "--containerd-registry-config-path",
                    f"{etc}/containerd/certs.d",
                    "--mirrored-registries",
                    upstream.url,
                    "--mirror-targets",
                    target.url,
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert spegel.returncode == 0, spegel.stderr
            assert os.path.isdir(f"{etc}/containerd/certs.d/_backup")
        else:
            os.makedirs(registry_dir)
            Path(registry_dir, "hosts.toml").write_text(hosts_toml(upstream, target))
        server = ContainerdServer(
            work,
            bin_dir=directory,
            version=version,
            cri=True,
            extra=cri_config(line, setting, version),
            etc_dir=etc,
        ).start()
        try:
            pulled = server.crictl_pull(f"{upstream.host}/{repo}:v1")
            assert pulled.returncode == 0, pulled.stderr + server.proc.log_tail()
        finally:
            server.stop()
        at_mirror = target.requests_from("containerd/", repo)
        at_upstream = upstream.requests_from("containerd/", repo)
        assert bool(at_mirror) != bool(at_upstream), (at_mirror, at_upstream)
        went = "mirror" if at_mirror else "upstream"
        # What the exporter reads: the version from the binary, as --containerd.binary.
        found_version = read_version(binary)
        settings = config.settings(server.config, (found_version.major, found_version.minor))
        dirs = hostsdir.read_host_dirs(
            settings.config_path, settings.config_path_set_by, settings.pull_path, prefix=work
        )
        [found] = [d for d in dirs.dirs if d.registry == upstream.host]
        assert found.mirrors == 1
        assert found.writer == ("spegel" if kind == "spegel" else "other")
        assert found.upstream_last
        assert found.verdict == ("used" if went == "mirror" else "ignored"), (found, went)
        key = table_key(*case)
        version_text = re.search(r" v?(\d+\.\d+\.\d+\S*)", builds.version_line(binary)).group(1)
        row = measured_row(key, went, found, settings, version_text)
        if os.environ.get("KSE_UPDATE_DOCS"):
            TABLE.put(row, ROW_ORDER)
        assert TABLE.rows().get(key) == row, (
            "run with KSE_UPDATE_DOCS=1 and commit docs/imagepull.md"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.unit
def test_the_doc_holds_a_row_for_each_case_and_no_other():
    assert list(TABLE.rows()) == ROW_ORDER
