"""A real containerd with its root, state and sockets under a temp dir.

The lines the suite runs: 1.7 (Debian trixie's, unpacked by .ci/setup.d/52-containerd-
trixie.sh), 2.3 (the LTS) and 2.4 (the newest), both built from the Go module proxy by
.ci/setup.d/50-containerd.sh. 2.3 is the default: what every test that needs "a containerd"
runs; KSE_CONTAINERD_DIR=DIR runs DIR/containerd and DIR/ctr instead (`make
test-containerd-2.4`). tests/imagepull's version-parametrized tests take each line by name.

Each server runs in a mount namespace of its own with a tmpfs on /run: whatever `state`
says, 1.7 creates /run/containerd and 2.x's NRI its socket, /run/nri/nri.sock. The CRI
plugin is off unless a test asks for it (most play the kubelet themselves), and then its
CNI config directory is in the work dir, as the opt plugin's path is: nothing is written
outside the work dir. `ctr` drives pulls.
"""

import functools
import json
import os
import re
import shutil
import subprocess
import time

from . import builds
from .procs import Proc

# Every line tests/imagepull compares its two sources and reads the config on
# (test_ingest.py, test_containerd_config.py, test_pull_errors.py), oldest first.
VERSIONS = ("1.7", "2.3", "2.4")
DEFAULT = "2.3"
TRIXIE = os.environ.get("CONTAINERD17_DIR", str(builds.CACHE / "containerd-trixie"))
# The .ci/setup.d step that puts each there.
SETUP_STEPS = {
    "1.7": "52-containerd-trixie.sh",
    "2.1": "50-containerd.sh",
    "2.3": "50-containerd.sh",
    "2.4": "50-containerd.sh",
}
DISABLED_CRI = (
    '"io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images"'
)

# Versions 2 and 3 name the servers' sockets at the top level; version 4 (containerd 2.3+,
# the version its `config default` writes) in server plugins, and ignores the old tables.
SERVERS = {
    3: '[grpc]\n  address = "{sock}"\n[ttrpc]\n  address = "{sock}.ttrpc"\n'
    '[debug]\n  address = "{sock}.debug"\n',
    4: '[plugins."io.containerd.server.v1.grpc"]\n  address = "{sock}"\n'
    '[plugins."io.containerd.server.v1.ttrpc"]\n  address = "{sock}.ttrpc"\n'
    '[plugins."io.containerd.server.v1.debug"]\n  address = "{sock}.debug"\n',
}
# With the CRI on, its CNI config directory in the work dir: the CRI creates it (0700) to
# watch, /etc/cni/net.d by default.
CNI = {
    2: '[plugins."io.containerd.grpc.v1.cri".cni]\n  conf_dir = "{dir}"\n',
    3: '[plugins."io.containerd.cri.v1.runtime".cni]\n  conf_dir = "{dir}"\n',
}
METRICS = {
    3: '[metrics]\n  address = "{address}"\n',
    4: '[plugins."io.containerd.server.v1.metrics"]\n  address = "{address}"\n',
}

CONFIG = """\
version = {version}
imports = {imports}
root = "{root}"
state = "{state}"
# The CRI plugin is off unless asked for: 1.x has it as io.containerd.grpc.v1.cri; 2.x
# split it into io.containerd.cri.v1.runtime and .images, which start (and watch
# /etc/cni/net.d) unless named too. 1.x ignores the names it does not know.
disabled_plugins = [{disabled}]
{servers}[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"
{extra}"""

# In a mount namespace of its own, /run a tmpfs there: what containerd puts in /run
# whatever its config says (/run/containerd, /run/nri) stays out of the host's.
# `exec` keeps one PID from unshare to containerd: tests stop and pause it by PID. `-n`: no
# /run/mount/utab written on the host's /run before the tmpfs covers it.
PRIVATE_RUN = 'mount -n -t tmpfs -o mode=0755 kse-containerd-run /run && exec "$@"'
# With `etc_dir`: also /etc as an overlay on that tmpfs, and the two registry host roots of
# containerd 2.2+'s default config_path bound from ETC/containerd/certs.d and
# ETC/docker/certs.d, so a test writes what containerd reads there without touching the
# host's /etc.
PRIVATE_ETC = (
    "mount -n -t tmpfs -o mode=0755 kse-containerd-run /run"
    " && mkdir -p /run/kse-etc/u /run/kse-etc/w"
    " && mount -n -t overlay kse-etc -o lowerdir=/etc,upperdir=/run/kse-etc/u,"
    "workdir=/run/kse-etc/w /etc"
    " && mkdir -p /etc/containerd/certs.d /etc/docker/certs.d"
    ' && mount -n --bind "$KSE_ETC/containerd/certs.d" /etc/containerd/certs.d'
    ' && mount -n --bind "$KSE_ETC/docker/certs.d" /etc/docker/certs.d'
    ' && exec "$@"'
)


def bin_dir(line: str) -> str:
    """The directory of containerd LINE's (a VERSIONS item) containerd and ctr; missing,
    FileNotFoundError names the setup step."""
    if line == "1.7":
        path = os.path.join(TRIXIE, "root", "usr", "bin")
        if not os.path.exists(os.path.join(path, "containerd")):
            raise FileNotFoundError(
                f"{path}/containerd missing: run .ci/setup.d/{SETUP_STEPS[line]}"
            )
        return path
    return builds.containerd_dir(line)


def binary(line: str) -> str:
    """The containerd of LINE; missing, the error names its step."""
    return os.path.join(bin_dir(line), "containerd")


def default_bin_dir() -> str:
    return os.environ.get("KSE_CONTAINERD_DIR") or bin_dir(DEFAULT)


@functools.cache
def release(directory: str) -> tuple[int, int]:
    """(major, minor) of DIRECTORY/containerd, as `containerd --version` says."""
    out = builds.version_line(os.path.join(directory, "containerd"))
    found = re.search(r" v?(\d+)\.(\d+)\.", out)
    if not found:
        raise RuntimeError(f"{directory}/containerd: no version in {out!r}")
    return int(found.group(1)), int(found.group(2))


def newest_config_version(directory: str) -> int:
    """The config version containerd in DIRECTORY writes (`config default`): 2 on 1.x, 3 on
    2.0-2.2, 4 from 2.3."""
    major, minor = release(directory)
    return 2 if major < 2 else 3 if minor < 3 else 4


def require(path: str) -> str:
    if not os.path.exists(path):
        steps = " or ".join(sorted(set(SETUP_STEPS.values())))
        raise FileNotFoundError(f"{path} is missing (.ci/setup.d/{steps} puts it there)")
    return path


class ContainerdServer:
    """containerd on a unix socket in `workdir`; `ctr(...)` runs ctr against it."""

    def __init__(
        self,
        workdir,
        namespace="k8s.io",
        bin_dir=None,
        version=None,
        extra="",
        cri=False,
        imports=(),
        metrics_address=None,
        etc_dir=None,
        prefix=(),
    ):
        """bin_dir: where containerd and ctr are (default: the default line, or
        $KSE_CONTAINERD_DIR); `version`: the config's (default the newest that containerd
        writes); `extra` is TOML appended to the config, e.g. pull settings; `cri` keeps
        the CRI plugin on (its pull settings are then in `config dump`);
        `metrics_address` (HOST:PORT) serves containerd's /v1/metrics there; `etc_dir`:
        what containerd sees of /etc/containerd/certs.d and /etc/docker/certs.d
        (PRIVATE_ETC); `prefix` runs it under another command (`nsenter --net=NETNS`)."""
        self.etc_dir = etc_dir
        self.prefix = list(prefix)
        self.cri, self.imports = cri, list(imports)
        self.workdir = str(workdir)
        self.bin_dir = bin_dir or default_bin_dir()
        self.containerd = os.path.join(self.bin_dir, "containerd")
        self.ctr_binary = os.path.join(self.bin_dir, "ctr")
        self.version = version or newest_config_version(self.bin_dir)
        self.extra = extra
        self.metrics_address = metrics_address
        self.config = os.path.join(self.workdir, "config.toml")
        # Unix socket paths are limited to 108 bytes: keep it short and inside workdir.
        self.address = os.path.join(self.workdir, "c.sock")
        self.namespace = namespace
        self.proc = None

    @property
    def release(self) -> tuple[int, int]:
        return release(self.bin_dir)

    def _config_text(self) -> str:
        layout = 4 if self.version >= 4 else 3
        servers = SERVERS[layout].format(sock=self.address)
        if self.metrics_address:
            servers += METRICS[layout].format(address=self.metrics_address)
        if self.cri:
            cni = os.path.join(self.workdir, "cni", "net.d")
            servers += CNI[2 if self.version == 2 else 3].format(dir=cni)
        return CONFIG.format(
            root=os.path.join(self.workdir, "root"),
            state=os.path.join(self.workdir, "state"),
            servers=servers,
            opt=os.path.join(self.workdir, "opt"),
            version=self.version,
            extra=self.extra,
            imports=json.dumps(self.imports),
            disabled="" if self.cri else DISABLED_CRI,
        )

    def start(self, timeout=30.0):
        os.makedirs(self.workdir, exist_ok=True)
        with open(self.config, "w") as f:
            f.write(self._config_text())
        # In "/", as systemd starts it: containerd 1.x resolves a relative import
        # against its working directory.
        env = None
        if self.etc_dir:
            for root in ("containerd", "docker"):
                os.makedirs(os.path.join(self.etc_dir, root, "certs.d"), exist_ok=True)
            env = {**os.environ, "KSE_ETC": str(self.etc_dir)}
        script = PRIVATE_ETC if self.etc_dir else PRIVATE_RUN
        self.proc = Proc(
            [*self.prefix, "unshare", "--mount", "--propagation", "private"]
            + ["sh", "-c", script, "sh", require(self.containerd), "--config", self.config],
            os.path.join(self.workdir, "containerd.log"),
            env=env,
            cwd="/",
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.proc.alive():
                raise RuntimeError(f"containerd exited early:\n{self.proc.log_tail()}")
            if os.path.exists(self.address) and self.ctr("version", check=False).returncode == 0:
                return self
            time.sleep(0.1)
        raise TimeoutError(f"containerd not ready after {timeout}s:\n{self.proc.log_tail()}")

    def ctr_argv(self, *args):
        return [require(self.ctr_binary), "-a", self.address, "-n", self.namespace, *args]

    def ctr(self, *args, check=True, timeout=120):
        return subprocess.run(
            self.ctr_argv(*args), capture_output=True, text=True, check=check, timeout=timeout
        )

    def crictl_pull(self, image: str) -> subprocess.CompletedProcess:
        """`crictl pull IMAGE` through this server's CRI, as the kubelet pulls: the CRI's
        registry host and mirror handling, which `ctr` does not take."""
        endpoint = f"unix://{self.address}"
        return subprocess.run(
            [
                builds.crictl_binary(),
                "--runtime-endpoint",
                endpoint,
                "--image-endpoint",
                endpoint,
                "--timeout",
                "60s",
                "pull",
                image,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def fetch(self, ref, log_path):
        """Start `ctr content fetch` of ref over plain HTTP as a process (stop it by PID)."""
        return Proc(self.ctr_argv("content", "fetch", "--plain-http", ref), log_path)

    def layers_downloading(self, want: int = 0, timeout: float = 60.0) -> int:
        """Layer ingests active now, once at least `want` are (or at the timeout)."""
        from kube_scale_exporter.containerd.client import ContainerdClient  # noqa: PLC0415

        client = ContainerdClient(self.address, self.namespace, 5)
        deadline = time.monotonic() + timeout
        while True:
            n = sum(1 for i in client.ingests() if i.kind == "layer")
            if n >= want or time.monotonic() > deadline:
                return n
            time.sleep(0.2)

    def config_dump(self) -> str:
        """`containerd config dump` of this server's config: what containerd runs."""
        return subprocess.run(
            [require(self.containerd), "--config", self.config, "config", "dump"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
            cwd="/",
        ).stdout

    def stop(self):
        if self.proc:
            self.proc.stop()

    def wipe(self):
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
