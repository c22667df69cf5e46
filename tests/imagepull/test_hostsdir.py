"""containerd's registry host directories read as the collector reads them: the verdict
rules, the writers' markers, and what hostile directories cost (tests/imagepull/
test_mirrors.py checks the verdicts against real pulls)."""

import os
import time
from pathlib import Path

import pytest

from kube_scale_exporter.cli import parse
from kube_scale_exporter.collectors.imagepull import ImagePullCollector
from kube_scale_exporter.collectors.imagepull.advice import advise
from kube_scale_exporter.collectors.imagepull.state import combine, families
from kube_scale_exporter.containerd import buildinfo, hostsdir
from kube_scale_exporter.containerd.config import PullSettings
from kube_scale_exporter.containerd.hostsdir import (
    DEFAULT_CONFIG_PATH,
    MAX_DIRS,
    RegistryDir,
    judge,
    read_host_dirs,
    registry_of,
)
from kube_scale_exporter.files import HOSTS_TOML_BYTES
from testbed.golden import render

pytestmark = pytest.mark.unit

CERTS, DOCKER = hostsdir.DEFAULT_ROOTS
MIRROR = 'server = "https://registry-1.docker.io"\n[host."http://10.0.0.7:30020"]\n'
# As Spegel v0.7.4's `configuration` writes it (no trailing newline).
SPEGEL = (
    "server = 'https://registry-1.docker.io'\n\n[host.'http://10.0.0.7:30020']\n"
    "capabilities = ['pull', 'resolve']\ndial_timeout = '200ms'\n\n"
    "[host.'http://10.0.0.7:30021']\ncapabilities = ['pull', 'resolve']\n"
    "dial_timeout = '200ms'"
)
DRAGONFLY = (
    'server = "https://registry-1.docker.io"\n[host."http://127.0.0.1:4001"]\n'
    'capabilities = ["pull", "resolve"]\n'
    '[host."http://127.0.0.1:4001".header]\nX-Dragonfly-Registry = "https://index.docker.io"\n'
)


def tree(tmp_path, files: dict[str, str]) -> str:
    """The host's / under tmp_path, holding `files` (path -> text)."""
    for path, text in files.items():
        full = tmp_path / path.lstrip("/")
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(text)
    return str(tmp_path)


def one(dirs, name="docker.io"):
    [found] = [d for d in dirs.dirs if d.name == name]
    return found


@pytest.mark.parametrize(
    ("config_path", "path", "root", "verdict", "reason"),
    [
        (CERTS, "transfer", CERTS, "used", "config_path"),
        (DEFAULT_CONFIG_PATH, "transfer", CERTS, "ignored", "transfer_path_colon_list"),
        (DEFAULT_CONFIG_PATH, "local", CERTS, "used", "config_path"),
        (DEFAULT_CONFIG_PATH, "local", DOCKER, "used", "config_path"),
        (DEFAULT_CONFIG_PATH, "unknown", CERTS, "unknown", "version_unknown"),
        (CERTS, "unknown", CERTS, "used", "config_path"),  # one directory: both pulls read it
        ("", "transfer", CERTS, "ignored", "no_config_path"),
        ("", "local", CERTS, "ignored", "no_config_path"),
        ("/etc/containerd/registries", "local", CERTS, "ignored", "not_in_config_path"),
        (None, "transfer", CERTS, "ignored", "version_unknown"),
        (None, "local", CERTS, "unknown", "version_unknown"),
    ],
)
def test_the_verdict_rules(tmp_path, config_path, path, root, verdict, reason):
    prefix = tree(tmp_path, {f"{root}/docker.io/hosts.toml": MIRROR})
    found = one(read_host_dirs(config_path, "config", path, prefix=prefix))
    assert (found.root, found.verdict, found.reason, found.mirrors) == (root, verdict, reason, 1)


def test_on_the_local_pull_the_first_root_with_the_registry_or_default_wins(tmp_path):
    prefix = tree(
        tmp_path,
        {
            f"{CERTS}/_default/hosts.toml": MIRROR,
            f"{DOCKER}/docker.io/hosts.toml": MIRROR,
            f"{CERTS}/quay.io/hosts.toml": MIRROR,
        },
    )
    dirs = read_host_dirs(DEFAULT_CONFIG_PATH, "default", "local", prefix=prefix)
    assert [(d.root, d.name, d.verdict, d.reason) for d in dirs.dirs] == [
        (CERTS, "_default", "used", "config_path"),
        (CERTS, "quay.io", "used", "config_path"),
        (DOCKER, "docker.io", "ignored", "shadowed"),
    ]


def test_a_directory_with_certificates_only_has_no_mirror(tmp_path):
    prefix = tree(tmp_path, {f"{CERTS}/registry.example/ca.crt": "---"})
    found = one(read_host_dirs(CERTS, "config", "transfer", prefix=prefix), "registry.example")
    assert (found.mirrors, found.verdict, found.upstream_last) == (0, "used", True)


def test_writers_and_upstream_last(tmp_path):
    prefix = tree(
        tmp_path,
        {
            f"{CERTS}/docker.io/hosts.toml": SPEGEL,
            f"{CERTS}/_backup/docker.io/hosts.toml": MIRROR,
            f"{CERTS}/ghcr.io/hosts.toml": DRAGONFLY.replace("registry-1.docker.io", "ghcr.io"),
            # server names the mirror: the registry itself is never tried.
            f"{CERTS}/quay.io/hosts.toml": 'server = "http://10.0.0.9:5000"\n',
            # a push-only host is no mirror for pulls
            f"{CERTS}/gcr.io/hosts.toml": '[host."https://p"]\n  capabilities = ["push"]\n',
        },
    )
    dirs = read_host_dirs(CERTS, "config", "transfer", prefix=prefix)
    got = {d.name: (d.mirrors, d.writer, d.upstream_last) for d in dirs.dirs}
    assert got == {
        "docker.io": (2, "spegel", True),
        "gcr.io": (0, "other", True),
        "ghcr.io": (1, "dragonfly", True),
        "quay.io": (0, "other", False),
    }
    assert "_backup" not in got  # Spegel's copy of what it replaced is no registry


def test_registry_of_reads_containerd_s_port_spelling():
    assert registry_of("127.0.0.1_5000_") == "127.0.0.1:5000"
    assert registry_of("registry.example:5000") == "registry.example:5000"
    assert registry_of("my_registry") == "my_registry"
    assert registry_of("_default") == "_default"


def test_hostile_directories_are_named_and_bounded(tmp_path):
    """A hosts.toml that does not parse, one that is a FIFO, one of 10 MB, a registry
    directory that is a symlink loop, a root that is a FIFO: each is reported by name, none
    blocks, and the good directory beside them keeps its verdict."""
    prefix = tree(
        tmp_path,
        {
            f"{CERTS}/bad.example/hosts.toml": "server = [unclosed\n",
            f"{CERTS}/docker.io/hosts.toml": MIRROR,
            f"{CERTS}/big.example/hosts.toml": "#" * (10 << 20),
        },
    )
    os.makedirs(f"{prefix}{CERTS}/fifo.example")
    os.mkfifo(f"{prefix}{CERTS}/fifo.example/hosts.toml")
    os.symlink("loop.example", f"{prefix}{CERTS}/loop.example")
    os.makedirs(f"{prefix}/etc/docker")
    os.mkfifo(f"{prefix}{DOCKER}")
    started = time.monotonic()
    dirs = read_host_dirs(CERTS, "config", "transfer", prefix=prefix)
    assert time.monotonic() - started < 5
    got = {d.name: (d.verdict, d.reason) for d in dirs.dirs}
    assert got == {
        "bad.example": ("ignored", "hosts_toml_invalid"),
        "big.example": ("unknown", "unreadable"),
        "docker.io": ("used", "config_path"),
        "fifo.example": ("unknown", "unreadable"),
    }
    assert f"over the {HOSTS_TOML_BYTES >> 10} KiB cap" in one(dirs, "big.example").error
    assert "is a FIFO" in one(dirs, "fifo.example").error
    assert sorted(dirs.problems) == [
        f"{CERTS}/loop.example: a symlink loop",
        f"{DOCKER}: not a directory",
    ]
    text = exposition(dirs)
    assert "kubescale_containerd_registry_host_dirs_unreadable 4.0" in text
    warnings = [f.summary for f in advise(state(dirs)) if f.severity == "warning"]
    assert f"registry host directory not read: {CERTS}/loop.example: a symlink loop" in warnings


def test_a_hundred_thousand_registry_directories_cost_a_bounded_read(tmp_path):
    root = tmp_path / CERTS.lstrip("/")
    root.mkdir(parents=True)
    for i in range(100_000):
        os.mkdir(root / f"r{i:06d}.example")
    started = time.monotonic()
    dirs = read_host_dirs(CERTS, "config", "transfer", prefix=str(tmp_path))
    took = time.monotonic() - started
    assert len(dirs.dirs) == MAX_DIRS
    # Names are read up to MAX_ENTRIES, and counted up to as many more.
    assert dirs.unlisted == 2 * hostsdir.MAX_ENTRIES - MAX_DIRS
    assert took < 2.0, took
    text = exposition(dirs)
    assert text.count("\nkubescale_containerd_registry_mirror_hosts{") == MAX_DIRS
    assert f"kubescale_containerd_registry_host_dirs_unlisted {dirs.unlisted}.0" in text


def test_judge_keeps_an_unparsable_file_s_reason_where_containerd_reads_it():
    bad = RegistryDir(CERTS, "x", "x", verdict="ignored", reason="hosts_toml_invalid", error="e")
    assert judge(bad, [CERTS], "transfer", set()).reason == "hosts_toml_invalid"
    assert judge(bad, [], "transfer", set()).reason == "no_config_path"


SETTINGS = PullSettings(
    3,
    300.0,
    "k",
    transfer=True,
    pull_path="transfer",
    pull_reason="default",
    config_path=CERTS,
    config_path_set_by="config",
    major=2,
    config_version=3,
)


def state(dirs, settings=SETTINGS):
    return combine(
        0.0,
        120.0,
        [],
        set(),
        None,
        None,
        [],
        containerd=settings,
        containerd_major=(2, "config"),
        host_dirs=dirs,
    )


def exposition(dirs) -> str:
    return render(families(state(dirs)))


def test_check_names_the_fix_for_the_config_s_version(tmp_path):
    prefix = tree(tmp_path, {f"{CERTS}/docker.io/hosts.toml": SPEGEL})
    for version, table in (
        (2, '[plugins."io.containerd.grpc.v1.cri".registry]'),
        (3, "[plugins.'io.containerd.cri.v1.images'.registry]"),
    ):
        settings = PullSettings(
            3,
            300.0,
            "k",
            pull_path="transfer",
            pull_reason="default",
            transfer=True,
            config_path="",
            config_path_set_by="none",
            major=2,
            config_version=version,
        )
        dirs = read_host_dirs("", "none", "transfer", prefix=prefix)
        [warning] = [f for f in advise(state(dirs, settings)) if f.severity == "warning"]
        assert warning.summary.endswith(
            "2 mirror(s), written by spegel, that containerd ignores (no_config_path)"
        )
        assert f'{table}\n    config_path = "{CERTS}"' in warning.advice


def test_buildinfo_text():
    v2 = "path\tgithub.com/containerd/containerd/v2/cmd/containerd\nmod\tgithub.com/containerd/containerd/v2\tv2.4.2\th1:x=\n"
    assert buildinfo.parse_modinfo(v2) == buildinfo.BinaryVersion(2, 4, "v2.4.2")
    debian = "path\tgithub.com/containerd/containerd/cmd/containerd\nbuild\t-trimpath=true\n"
    assert buildinfo.parse_modinfo(debian) == buildinfo.BinaryVersion(1, None, "")
    devel = v2.replace("v2.4.2", "(devel)")
    assert buildinfo.parse_modinfo(devel) == buildinfo.BinaryVersion(2, None, "")
    with pytest.raises(ValueError, match="not containerd's"):
        buildinfo.parse_modinfo("path\tgithub.com/opencontainers/runc\n")


def test_buildinfo_refuses_what_is_no_go_binary(tmp_path):
    text = tmp_path / "containerd"
    text.write_text("#!/bin/sh\n")
    with pytest.raises(buildinfo.BuildInfoError, match="not a 64-bit little-endian ELF"):
        buildinfo.read_version(str(text))
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(buildinfo.BuildInfoError, match="not a regular file"):
        buildinfo.read_version(str(tmp_path / "fifo"))


def test_containerd_binary_flag_must_name_a_file(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        parse(["--collector.imagepull", "--containerd.binary", str(tmp_path / "none")])
    assert done.value.code == 2
    assert "--containerd.binary: no such file" in capsys.readouterr().err


def test_the_collector_reports_mirrors_from_the_ingest_source(tmp_path, monkeypatch):
    """The whole collector without socket or binary: a version 4 config says 2.x, the
    registry series come with the pull settings, the verdict from the host directories."""
    monkeypatch.delenv("NODE_NAME", raising=False)
    (tmp_path / "ingest").mkdir()
    config = tmp_path / "config.toml"
    config.write_text(
        'version = 4\n[plugins."io.containerd.cri.v1.images".registry]\n'
        f'  config_path = "{tmp_path}/certs.d:/etc/docker/certs.d"\n'
    )
    tree(tmp_path, {"/certs.d/docker.io/hosts.toml": SPEGEL})
    # tree() writes under tmp_path: the config names that root itself.
    args, _ = parse(
        [
            "--collector.disable-defaults",
            "--collector.imagepull",
            "--image-pull.source=ingest",
            f"--containerd.ingest-dir={tmp_path}/ingest",
            f"--containerd.config={config}",
        ]
    )
    collector = ImagePullCollector(args)
    try:
        text = render(collector.families(collector.observe()))
    finally:
        collector.close()
    assert 'kubescale_containerd_major_version{source="config"} 2.0' in text
    assert 'kubescale_containerd_image_pull_path{path="transfer",reason="default"} 1.0' in text
    assert (
        f'registry="docker.io",root="{tmp_path}/certs.d",upstream_last="true",'
        'verdict="ignored",writer="spegel"} 2.0'
    ) in text
    assert 'reason="transfer_path_colon_list"' in text


def test_buildinfo_refuses_offsets_past_the_file():
    """fuzz/corpus/buildinfo/crash-e19bd075...: a string table offset of 2**64 - 1 once
    raised OverflowError out of os.pread."""
    crash = Path(__file__).parents[2] / "fuzz/corpus/buildinfo"
    [path] = crash.glob("crash-e19bd075*")
    with pytest.raises(buildinfo.BuildInfoError, match="past the end"):
        buildinfo.read_version(str(path))
