"""containerd's pull settings as the imagepull collector exports them, against what a real
containerd runs: `containerd config dump` of trixie's 1.7 (config version 2), 2.3 and 2.4
(versions 2, 3 and 4), each started with the config, imports included, and its own log
line when its CRI falls back from the transfer service to pulling itself; then a real CRI
pull whose layers download as many at once as the exported setting says.
"""

import io
import os
import subprocess
import tempfile
import threading
import time
import tomllib

import pytest

from kube_scale_exporter.check import run_check
from kube_scale_exporter.cli import parse
from kube_scale_exporter.containerd import config
from kube_scale_exporter.containerd.client import ContainerdClient
from kube_scale_exporter.durations import go_duration
from testbed.containerd_server import VERSIONS, ContainerdServer, bin_dir, default_bin_dir, release
from testbed.metrics import collect, sample

from .test_containerd import MiB, fresh_repo
from .test_ingest import cri_pull_quietly
from .test_pull_errors import cri_containerd

CRI, IMAGES = '"io.containerd.grpc.v1.cri"', '"io.containerd.cri.v1.images"'
TRANSFER = '"io.containerd.transfer.v1.local"'

# name -> (config version, TOML appended to the server's config, {drop-in name: TOML});
# drop-ins are imported as conf.d/*.toml (relative on 2.x, absolute on 1.x).
CASES = {
    "v2-defaults": (2, "", {}),
    # On 2.x a max_concurrent_downloads other than 3 makes the CRI pull itself: 10 holds.
    "v2-tuned": (
        2,
        f"[plugins.{CRI}]\n  max_concurrent_downloads = 10\n"
        f'  image_pull_progress_timeout = "30m"\n',
        {},
    ),
    # The drop-in's [cri] section replaces the main file's on 1.x (10 is lost), merges on 2.x
    # (its CNI directory is the server's, as the main file's: see ContainerdServer).
    "v2-drop-in": (
        2,
        f"[plugins.{CRI}]\n  max_concurrent_downloads = 10\n",
        {
            "50-timeout.toml": f"version = 2\n[plugins.{CRI}]\n"
            f'  image_pull_progress_timeout = "20m"\n'
            f'[plugins.{CRI}.cni]\n  conf_dir = "WORKDIR/cni/net.d"\n'
        },
    ),
    "v3-images-only": (
        3,
        f"[plugins.{IMAGES}]\n  max_concurrent_downloads = 10\n"
        f'  image_pull_progress_timeout = "30m"\n',
        {},
    ),
    # Through the transfer service: its own setting counts.
    "v3-transfer": (3, f"[plugins.{TRANSFER}]\n  max_concurrent_downloads = 8\n", {}),
    "v3-local-pull": (
        3,
        f"[plugins.{IMAGES}]\n  use_local_image_pull = true\n"
        f"  max_concurrent_downloads = 6\n"
        f'  image_pull_progress_timeout = "0s"\n',
        {},
    ),
    # A version 2 drop-in under a version 3 file: migrated (its CRI keys win).
    "v3-v2-drop-in": (
        3,
        f"[plugins.{IMAGES}]\n  max_concurrent_downloads = 7\n",
        {
            "10-old.toml": f"version = 2\n[plugins.{CRI}]\n"
            f"  max_concurrent_downloads = 4\n"
            f'  image_pull_progress_timeout = "45m"\n'
        },
    ),
    # 2.3+ migrate a version 3 file too: its old CRI keys move to the images plugin.
    "v3-old-cri-keys": (
        3,
        f'[plugins.{CRI}]\n  max_concurrent_downloads = 4\n  image_pull_progress_timeout = "45m"\n',
        {},
    ),
    # Registry mirrors in the images plugin (deprecated): the CRI pulls itself, 3 at once
    # by the images plugin's default, whatever the transfer service's 8 says.
    "v3-mirrors": (
        3,
        f"[plugins.{TRANSFER}]\n  max_concurrent_downloads = 8\n"
        f'[plugins.{IMAGES}.registry.mirrors."docker.io"]\n'
        f'  endpoint = ["https://mirror.invalid"]\n',
        {},
    ),
    # Version 4, what 2.3's `config default` writes.
    "v4-transfer": (
        4,
        f"[plugins.{TRANSFER}]\n  max_concurrent_downloads = 6\n"
        f'[plugins.{IMAGES}]\n  image_pull_progress_timeout = "20m"\n',
        {},
    ),
    # A version 4 file is not migrated: old CRI keys in it are read by nothing.
    "v4-old-cri-keys": (
        4,
        f'[plugins.{CRI}]\n  max_concurrent_downloads = 4\n  image_pull_progress_timeout = "45m"\n',
        {},
    ),
    # A version 2 drop-in under a version 4 file, and a version 4 one under a version 2 file.
    "v4-v2-drop-in": (
        4,
        f"[plugins.{TRANSFER}]\n  max_concurrent_downloads = 6\n",
        {"10-old.toml": f"version = 2\n[plugins.{CRI}]\n  max_concurrent_downloads = 5\n"},
    ),
    "v2-v4-drop-in": (
        2,
        f'[plugins.{CRI}]\n  image_pull_progress_timeout = "40m"\n',
        {"10-new.toml": f"version = 4\n[plugins.{TRANSFER}]\n  max_concurrent_downloads = 9\n"},
    ),
}
# The cases each line runs: 1.7 reads version 2 only.
LINE_CASES = {
    "1.7": [c for c in CASES if c.startswith("v2") and c != "v2-v4-drop-in"],
    "2.3": list(CASES),
    "2.4": list(CASES),
}
# containerd's names, in its log line, of what makes the CRI fall back from the transfer
# service (internal/cri/config/config.go), for the names config.py gives them.
FALLBACK_NAMES = {
    "max_concurrent_downloads": "MaxConcurrentDownloads",
    "registry.mirrors": "Registry.Mirrors",
}


def in_force(server):
    """(max_concurrent_downloads, progress timeout seconds, what 2.x's CRI fell back for)
    of a running server: its `config dump`, and on 2.x its log for the fallback."""
    plugins = tomllib.loads(server.config_dump())["plugins"]
    if server.release[0] == 1:
        cri = plugins["io.containerd.grpc.v1.cri"]
        timeout = cri.get("image_pull_progress_timeout")
        return (
            cri["max_concurrent_downloads"],
            0.0 if timeout is None else go_duration(timeout),
            None,
        )
    images = plugins["io.containerd.cri.v1.images"]
    with open(os.path.join(server.workdir, "containerd.log")) as f:
        found = [line for line in f if "Falling back to local image pull mode" in line]
    fallback = found[0].split("Found '")[1].split("'")[0] if found else None
    local = images["use_local_image_pull"] or fallback
    source = images if local else plugins["io.containerd.transfer.v1.local"]
    return (
        source["max_concurrent_downloads"],
        go_duration(images["image_pull_progress_timeout"]),
        fallback,
    )


def write_case(workdir, case, relative):
    version, extra, dropins = CASES[case]
    os.makedirs(f"{workdir}/conf.d")
    for name, text in dropins.items():
        with open(f"{workdir}/conf.d/{name}", "w") as f:
            f.write(text.replace("WORKDIR", workdir))
    # 1.x resolves a relative import against its working directory, 2.x against the file's.
    imports = ["conf.d/*.toml" if relative else f"{workdir}/conf.d/*.toml"]
    return version, extra, imports if dropins else ()


@pytest.fixture
def server_for():
    made = []

    def make(directory, case, **more):
        workdir = tempfile.mkdtemp(prefix="cc-", dir="/tmp")
        version, extra, imports = write_case(workdir, case, release(directory)[0] == 2)
        # The CRI plugin on: it is what reads these settings, and `config dump` leaves a
        # disabled plugin's section out.
        server = ContainerdServer(
            workdir, bin_dir=directory, version=version, extra=extra, cri=True, imports=imports
        )
        made.append(server)
        return server.start(**more)

    yield make
    for server in made:
        server.wipe()


@pytest.mark.integration
@pytest.mark.parametrize("line,case", [(v, c) for v in VERSIONS for c in LINE_CASES[v]])
def test_exported_settings_match_what_containerd_runs(line, case, server_for, make_collector):
    server = server_for(bin_dir(line), case)
    downloads, timeout, fallback = in_force(server)
    c = make_collector(server.address, "--containerd.config", server.config)
    families = collect(c)
    assert sample(families, "kubescale_containerd_max_concurrent_downloads") == downloads
    assert sample(families, "kubescale_containerd_image_pull_progress_timeout_seconds") == timeout
    settings = c.observe().containerd
    said = settings.fallback and FALLBACK_NAMES[settings.fallback.split(" = ")[0]]
    assert said == fallback, (settings, fallback)
    print(
        f"containerd {line} {case}: max_concurrent_downloads {downloads}, "
        f"progress timeout {timeout}s, fallback {fallback}"
    )


def writing_at_once(server, seconds):
    """(layer ingests open, most layers written at once) while a pull runs for `seconds`."""
    client = ContainerdClient(server.address, "k8s.io", 5)
    opened = most = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        layers = [i for i in client.ingests() if i.kind == "layer"]
        opened = max(opened, len(layers))
        most = max(most, sum(1 for i in layers if i.offset > 0))
        time.sleep(0.1)
    return opened, most


# The images plugin's max_concurrent_downloads other than 3: the CRI pulls itself, 2 at
# once; the transfer service's 2: the transfer service pulls, 2 at once. Both open every
# layer's ingest at once and write that many of them.
PULL_CASES = {
    "fallback": ("  max_concurrent_downloads = 2\n", ""),
    "transfer": ("", f"[plugins.{TRANSFER}]\n  max_concurrent_downloads = 2\n"),
}


@pytest.mark.integration
@pytest.mark.parametrize("case", sorted(PULL_CASES))
def test_a_cri_pull_writes_as_many_layers_at_once_as_exported(
    case, registry, proxy, make_collector
):
    """The setting in force, seen on a real pull of the CRI (the kubelet's PullImage) of 5
    layers of 16 MiB through the 4 MiB/s proxy, on the default containerd (2.3; 2.4 in
    `make test-containerd-2.4`)."""
    if release(default_bin_dir())[0] < 2:
        pytest.skip("containerd 1.x pulls only itself: the by-line config tests cover it")
    images, extra = PULL_CASES[case]
    server = cri_containerd(None, [proxy.host], timeout="5m", images=images, extra=extra)
    repo = fresh_repo()
    registry.push_image(repo, "v1", [16 * MiB] * 5)
    pull = threading.Thread(
        target=cri_pull_quietly, args=(server, f"{proxy.host}/{repo}:v1"), daemon=True
    )
    try:
        settings = make_collector(server.address, "--containerd.config", server.config)
        exported = sample(collect(settings), "kubescale_containerd_max_concurrent_downloads")
        pull.start()
        opened, most = writing_at_once(server, 6.0)
        print(f"containerd {case}: {opened} layers opened, {most} written at once")
        assert most == exported == 2
        assert opened == 5  # either way 2.x opens every layer's ingest at once
        transfer = settings.observe().containerd.transfer
        with open(os.path.join(server.workdir, "containerd.log")) as f:
            fell_back = "Falling back to local image pull mode" in f.read()
        assert (transfer, fell_back) == ((True, False) if case == "transfer" else (False, True))
    finally:
        server.wipe()
        pull.join(30)


@pytest.mark.integration
def test_a_missing_import_stops_containerd_and_is_listed():
    """On the default containerd (2.3; 2.4 in its own run) a plain import that does not
    exist stops containerd at start, while `config dump` ignores it: the exporter lists
    it in `check` (more likely not mounted into its pod)."""
    workdir = tempfile.mkdtemp(prefix="mi-", dir="/tmp")
    there = f"{workdir}/there.toml"
    with open(there, "w") as f:
        f.write(f"version = 4\n[plugins.{TRANSFER}]\n  max_concurrent_downloads = 7\n")
    server = ContainerdServer(workdir, imports=[f"{workdir}/missing.toml", there])
    try:
        with pytest.raises(RuntimeError, match="missing.toml: no such file or directory"):
            server.start(timeout=10)
        settings = config.settings(server.config, server.release)
        assert settings.missing == (f"{workdir}/missing.toml",)
        assert settings.max_concurrent_downloads == 7
    finally:
        server.wipe()


@pytest.mark.unit
def test_version_unknown_decides_by_the_file(tmp_path):
    """With the ingest source containerd's version is unknown: a version 2 file is read as
    1.x's, 3 and 4 as 2.3+'s. The pull is local on both lines here (2.x falls back for
    max_concurrent_downloads = 5); the config_path in force is not known (unset: empty on
    1.x and 2.0-2.1, a list of two from 2.2)."""
    path = tmp_path / "config.toml"
    path.write_text(f"version = 2\n[plugins.{CRI}]\n  max_concurrent_downloads = 5\n")
    assert config.settings(str(path), None) == config.PullSettings(
        5,
        None,
        "plugins.'io.containerd.grpc.v1.cri'.max_concurrent_downloads",
        files=(str(path),),
        pull_path="local",
        pull_reason="max_concurrent_downloads",
        config_path=None,
        config_path_set_by="unknown",
        major=None,
    )
    for version in (3, 4):
        path.write_text(
            f"version = {version}\n[plugins.{TRANSFER}]\n  max_concurrent_downloads = 5\n"
        )
        got = config.settings(str(path), None)
        assert (got.max_concurrent_downloads, got.transfer) == (5, True)


def settings_of(tmp_path, text, version, **dropins):
    for name, body in dropins.items():
        (tmp_path / f"{name}.toml").write_text(body)
    path = tmp_path / "config.toml"
    imports = [f"{name}.toml" for name in dropins]
    path.write_text(f"imports = {imports!r}\n{text}".replace("'", '"'))
    return config.settings(str(path), version)


@pytest.mark.unit
def test_old_cri_keys_are_migrated_per_file_from_2_3(tmp_path):
    """2.0-2.2 migrate the merged config only when it is version 2; 2.3+ migrate each file
    of version 2 or 3 before merging, and leave a version 4 file's old keys unread."""
    old = f"[plugins.{CRI}]\n  max_concurrent_downloads = 4\n"
    v3 = settings_of(tmp_path, f"version = 3\n{old}", (2, 3))
    assert (v3.max_concurrent_downloads, v3.transfer, v3.fallback) == (
        4,
        False,
        "max_concurrent_downloads = 4",
    )
    assert settings_of(tmp_path, f"version = 3\n{old}", (2, 1)).transfer
    assert settings_of(tmp_path, f"version = 4\n{old}", (2, 4)).max_concurrent_downloads == 3
    # The last file's version decides on 2.1: a version 3 drop-in leaves the v2 keys unread.
    under = settings_of(tmp_path, f"version = 2\n{old}", (2, 1), d="version = 3\n")
    assert under.max_concurrent_downloads == 3 and under.transfer
    under = settings_of(tmp_path, f"version = 2\n{old}", (2, 3), d="version = 4\n")
    assert under.max_concurrent_downloads == 4 and not under.transfer


@pytest.mark.unit
@pytest.mark.parametrize(
    "images,fallback",
    [
        ("use_local_image_pull = true\nmax_concurrent_downloads = 7", None),
        ("max_concurrent_downloads = 7", "max_concurrent_downloads = 7"),
        ("disable_snapshot_annotations = false", "disable_snapshot_annotations = false"),
        ("discard_unpacked_layers = true", "discard_unpacked_layers = true"),
        ("image_pull_with_sync_fs = true", "image_pull_with_sync_fs = true"),
        ('registry.mirrors."docker.io".endpoint = ["https://m.invalid"]', "registry.mirrors"),
        ('registry.configs."r.invalid".tls.insecure_skip_verify = true', "registry.configs"),
        ('registry.auths."r.invalid".username = "u"', "registry.auths"),
    ],
)
def test_what_makes_the_cri_pull_without_the_transfer_service(tmp_path, images, fallback):
    got = settings_of(
        tmp_path,
        f"version = 4\n[plugins.{TRANSFER}]\nmax_concurrent_downloads = 9\n"
        f"[plugins.{IMAGES}]\n{images}\n",
        (2, 4),
    )
    assert not got.transfer and got.fallback == fallback
    assert got.downloads_key == f"plugins.'{IMAGES[1:-1]}'.max_concurrent_downloads"
    assert got.max_concurrent_downloads == (7 if "7" in images else 3)


@pytest.mark.unit
@pytest.mark.parametrize(
    "text,where",
    [
        ("version = 5\n", "config.toml"),
        ('version = "4"\n', "config.toml"),
        ("version = 9999999999999999999999\n", "config.toml"),
        ('version = 4\nimports = ["DIR/d.toml"]\n', "d.toml"),
    ],
)
def test_a_config_version_no_containerd_known_here_reads_is_named(tmp_path, text, where):
    (tmp_path / "d.toml").write_text("version = 5\n")
    path = tmp_path / "config.toml"
    path.write_text(text.replace("DIR", str(tmp_path)))
    for version in (None, (1, 7), (2, 3), (2, 4)):
        with pytest.raises(config.UnknownConfigVersion, match="is not one this exporter knows"):
            try:
                config.settings(str(path), version)
            except config.UnknownConfigVersion as exc:
                assert str(tmp_path / where) in str(exc)
                raise


@pytest.mark.unit
def test_an_unknown_config_version_fails_the_collector_by_name(tmp_path, monkeypatch):
    """Nothing read from a file this exporter does not understand, so no series of its
    settings; but not silently either: the collector fails (its success series 0) with
    the file and the version, and `check` says so."""
    monkeypatch.delenv("NODE_NAME", raising=False)
    from kube_scale_exporter.collectors.imagepull import ImagePullCollector  # noqa: PLC0415
    from kube_scale_exporter.scrape import Scraper  # noqa: PLC0415

    (tmp_path / "ingest").mkdir()
    path = tmp_path / "config.toml"
    path.write_text("version = 5\n[plugins.'io.containerd.transfer.v1.local']\n")
    kubelet = tmp_path / "kubelet.yaml"
    kubelet.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
    args, _ = parse(
        [
            "--collector.disable-defaults",
            "--collector.imagepull",
            "--image-pull.source=ingest",
            f"--containerd.ingest-dir={tmp_path / 'ingest'}",
            f"--containerd.config={path}",
            f"--kubelet.config-file={kubelet}",
        ]
    )
    collector = ImagePullCollector(args)
    result = Scraper([collector]).scrape(5.0)
    (outcome,) = result.outcomes
    assert not outcome.ok and f"{path}: config version 5 is not one" in outcome.error
    assert not any(f.name.startswith("kubescale_containerd_") for f in result.families)
    out = io.StringIO()
    assert run_check([ImagePullCollector(args)], 5.0, out) == 1
    assert f"FAILED   the collector failed: UnknownConfigVersion: {path}: config version 5" in (
        out.getvalue()
    )


@pytest.mark.integration
def test_containerd_itself_refuses_a_version_it_does_not_know(tmp_path):
    """What the newest line says of version 5: it does not start (so a node whose file
    reads version 5 runs a containerd newer than this exporter knows, or none)."""
    path = tmp_path / "config.toml"
    path.write_text("version = 5\n")
    done = subprocess.run(
        [os.path.join(bin_dir("2.4"), "containerd"), "--config", str(path), "config", "dump"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    assert "expected containerd config version equal to or less than `4`, got `5`" in done.stderr


@pytest.mark.unit
def test_hostile_files_cost_nothing(tmp_path):
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    with pytest.raises(config.ConfigError, match="not a regular file"):
        config.settings(str(fifo), (2, 3))
    big = tmp_path / "big.toml"
    big.write_text("version = 3\n" + "#" * (config.MAX_FILE_BYTES + 1))
    with pytest.raises(config.ConfigError, match="KiB"):
        config.settings(str(big), (2, 3))
    loop = tmp_path / "loop.toml"
    loop.write_text('version = 3\nimports = ["loop.toml", "missing.toml"]\n')
    settings = config.settings(str(loop), (2, 3))
    assert settings.files == (str(loop),) and settings.missing == (str(tmp_path / "missing.toml"),)
    # containerd 1.x reads a relative import from its working directory, "/".
    v2 = tmp_path / "v2.toml"
    v2.write_text('version = 2\nimports = ["loop.toml"]\n')
    assert config.settings(str(v2), (1, 6)).missing == ("/loop.toml",)
    many = tmp_path / "many"
    many.mkdir()
    for i in range(config.MAX_FILES + 1):
        (many / f"{i:03}.toml").write_text("version = 3\n")
    loop.write_text('version = 3\nimports = ["many/*.toml"]\n')
    with pytest.raises(config.ConfigError, match="more than"):
        config.settings(str(loop), (2, 3))


@pytest.mark.unit
def test_flag_must_name_a_file():
    with pytest.raises(SystemExit) as exc:
        parse(["--collector.imagepull", "--containerd.config", "/nonexistent.toml"])
    assert exc.value.code == 2
