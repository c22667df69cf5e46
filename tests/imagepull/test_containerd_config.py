"""containerd's pull settings as the imagepull collector exports them, against what a real
containerd reports with `containerd config dump`: Debian's 1.6.20 (config version 2) and
Debian sid's 2.1.9 (versions 2 and 3), each started with the config, imports included.

containerd 2 is the unpacked sid package (.ci/setup.d/51-containerd-sid.sh); its tests
skip where it is missing.
"""

import os
import tempfile
import tomllib

import pytest

from kube_scale_exporter.cli import parse
from kube_scale_exporter.containerd import config
from kube_scale_exporter.durations import go_duration
from testbed.containerd_server import ContainerdServer
from testbed.metrics import collect, sample

CONTAINERD2_DIR = os.environ.get("CONTAINERD2_DIR", "/var/cache/kube-scale-exporter/containerd-sid")
BIN2 = os.path.join(CONTAINERD2_DIR, "root", "usr", "bin")
CRI, IMAGES = '"io.containerd.grpc.v1.cri"', '"io.containerd.cri.v1.images"'
TRANSFER = '"io.containerd.transfer.v1.local"'

# name -> (config version, TOML appended to the server's config, {drop-in name: TOML});
# drop-ins are imported as conf.d/*.toml (relative) or by absolute path for "v3-...".
CASES = {
    "v2-defaults": (2, "", {}),
    "v2-tuned": (
        2,
        f"[plugins.{CRI}]\n  max_concurrent_downloads = 10\n"
        f'  image_pull_progress_timeout = "30m"\n',
        {},
    ),
    # The drop-in's [cri] section replaces the main file's on 1.x (10 is lost), merges on 2.x.
    "v2-drop-in": (
        2,
        f"[plugins.{CRI}]\n  max_concurrent_downloads = 10\n",
        {
            "50-timeout.toml": f"version = 2\n[plugins.{CRI}]\n"
            f'  image_pull_progress_timeout = "20m"\n'
        },
    ),
    # On containerd 2 the CRI pulls through the transfer service: its own setting counts.
    "v3-images-only": (
        3,
        f"[plugins.{IMAGES}]\n  max_concurrent_downloads = 10\n"
        f'  image_pull_progress_timeout = "30m"\n',
        {},
    ),
    "v3-transfer": (3, f"[plugins.{TRANSFER}]\n  max_concurrent_downloads = 8\n", {}),
    "v3-local-pull": (
        3,
        f"[plugins.{IMAGES}]\n  use_local_image_pull = true\n"
        f"  max_concurrent_downloads = 6\n"
        f'  image_pull_progress_timeout = "0s"\n',
        {},
    ),
    # A version 2 drop-in under a version 3 file: the merged config is migrated.
    "v3-v2-drop-in": (
        3,
        f"[plugins.{IMAGES}]\n  max_concurrent_downloads = 7\n",
        {
            "10-old.toml": f"version = 2\n[plugins.{CRI}]\n"
            f"  max_concurrent_downloads = 4\n"
            f'  image_pull_progress_timeout = "45m"\n'
        },
    ),
}
RUNTIMES = {
    "1.6": ("/usr/bin", [c for c in CASES if c.startswith("v2")]),
    "2.1": (BIN2, list(CASES)),
}


def dumped(dump: str, major: int):
    """(max_concurrent_downloads, progress timeout seconds) in force, from a config dump."""
    plugins = tomllib.loads(dump)["plugins"]
    if major == 1:
        cri = plugins["io.containerd.grpc.v1.cri"]
        timeout = cri.get("image_pull_progress_timeout")
        return cri["max_concurrent_downloads"], 0.0 if timeout is None else go_duration(timeout)
    images = plugins["io.containerd.cri.v1.images"]
    source = (
        images if images["use_local_image_pull"] else plugins["io.containerd.transfer.v1.local"]
    )
    return source["max_concurrent_downloads"], go_duration(images["image_pull_progress_timeout"])


@pytest.fixture
def server_for():
    made = []

    def make(bin_dir, case):
        if not os.path.exists(os.path.join(bin_dir, "containerd")):
            pytest.skip(f"no containerd in {bin_dir} (.ci/setup.d/51-containerd-sid.sh)")
        workdir = tempfile.mkdtemp(prefix="cc-", dir="/tmp")
        version, extra, dropins = CASES[case]
        os.makedirs(f"{workdir}/conf.d")
        for name, text in dropins.items():
            with open(f"{workdir}/conf.d/{name}", "w") as f:
                f.write(text)
        # The CRI plugin on: it is what reads these settings, and `config dump` leaves a
        # disabled plugin's section out.
        # Relative for 2.x (against the file's directory), absolute otherwise: 1.x resolves a
        # relative one against its working directory.
        relative = version == 2 and bin_dir == BIN2
        imports = ["conf.d/*.toml" if relative else f"{workdir}/conf.d/*.toml"]
        server = ContainerdServer(
            workdir,
            bin_dir=bin_dir,
            version=version,
            extra=extra,
            cri=True,
            imports=imports if dropins else (),
        )
        made.append(server)
        return server.start()

    yield make
    for server in made:
        server.wipe()


@pytest.mark.integration
@pytest.mark.parametrize(
    "runtime,case", [(r, c) for r, (_, cases) in RUNTIMES.items() for c in cases]
)
def test_exported_settings_match_containerd_config_dump(runtime, case, server_for, make_collector):
    bin_dir = RUNTIMES[runtime][0]
    server = server_for(bin_dir, case)
    downloads, timeout = dumped(server.config_dump(), int(runtime[0]))
    c = make_collector(server.address, "--containerd.config", server.config)
    families = collect(c)
    assert sample(families, "kubescale_containerd_max_concurrent_downloads") == downloads
    assert sample(families, "kubescale_containerd_image_pull_progress_timeout_seconds") == timeout
    print(
        f"containerd {runtime} {case}: max_concurrent_downloads {downloads}, "
        f"progress timeout {timeout}s"
    )


@pytest.mark.integration
def test_a_v2_file_migrated_to_containerd_2_loses_the_download_tuning(server_for, make_collector):
    server = server_for(BIN2, "v2-tuned")
    c = make_collector(server.address, "--containerd.config", server.config)
    advice = [f for f in c.advise(c.observe()) if f.severity == "warning"]
    assert any(
        "max_concurrent_downloads = 10 in the CRI images plugin is ignored" in f.summary
        for f in advice
    ), advice


@pytest.mark.unit
def test_version_unknown_decides_by_the_file(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(f"version = 2\n[plugins.{CRI}]\n  max_concurrent_downloads = 5\n")
    assert config.settings(str(path), None) == config.PullSettings(
        5, None, "plugins.'io.containerd.grpc.v1.cri'.max_concurrent_downloads", files=(str(path),)
    )
    path.write_text(f"version = 3\n[plugins.{TRANSFER}]\n  max_concurrent_downloads = 5\n")
    assert config.settings(str(path), None).max_concurrent_downloads == 5


@pytest.mark.unit
@pytest.mark.parametrize(
    "text,error",
    [
        ("version = 2\n[plugins", "Expected"),
        (f"version = 2\n[plugins.{CRI}]\n  max_concurrent_downloads = -1\n", "not a count"),
        (
            f'version = 3\n[plugins.{IMAGES}]\n  image_pull_progress_timeout = "soon"\n',
            "not a duration",
        ),
        ("version = 1\n", "version 1; containerd 1.x"),
        ('version = 2\nimports = "x"\n', "not a list"),
    ],
)
def test_bad_configs_are_refused_with_the_file_named(tmp_path, text, error):
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(config.ConfigError, match=error) as exc:
        config.settings(str(path), (2, 1) if "version = 3" in text else (1, 7))
    assert str(path) in str(exc.value)


@pytest.mark.unit
def test_hostile_files_cost_nothing(tmp_path):
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    with pytest.raises(config.ConfigError, match="not a regular file"):
        config.settings(str(fifo), (2, 1))
    big = tmp_path / "big.toml"
    big.write_text("version = 3\n" + "#" * (config.MAX_FILE_BYTES + 1))
    with pytest.raises(config.ConfigError, match="KiB"):
        config.settings(str(big), (2, 1))
    loop = tmp_path / "loop.toml"
    loop.write_text('version = 3\nimports = ["loop.toml", "missing.toml"]\n')
    settings = config.settings(str(loop), (2, 1))
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
        config.settings(str(loop), (2, 1))


@pytest.mark.unit
def test_flag_must_name_a_file():
    with pytest.raises(SystemExit) as exc:
        parse(["--collector.imagepull", "--containerd.config", "/nonexistent.toml"])
    assert exc.value.code == 2
