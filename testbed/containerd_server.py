"""A real containerd (Debian's) with its root, state and sockets under a temp dir.

The CRI plugin is off unless a test asks for it (most play the kubelet themselves) and
the opt plugin's path is set, so nothing is written outside the work dir. `ctr` drives
pulls.
"""

import contextlib
import json
import os
import shutil
import subprocess
import time

from .procs import Proc

# Debian bookworm's 1.6 by default; KSE_CONTAINERD_DIR=DIR runs DIR/containerd and DIR/ctr
# instead (`make test-containerd2`: sid's 2.x unpacked by .ci/setup.d/51-containerd-sid.sh).
_DIR = os.environ.get("KSE_CONTAINERD_DIR", "/usr/bin")
CONTAINERD = os.path.join(_DIR, "containerd")
CTR = os.path.join(_DIR, "ctr")
# Every containerd the suite compares its two sources on (tests/imagepull/test_ingest.py):
# bookworm's, trixie's (.ci/setup.d/52-containerd-trixie.sh) and sid's (51-containerd-sid.sh).
_CACHE = "/var/cache/kube-scale-exporter"
VERSIONS = {
    "1.6": "/usr/bin",
    "1.7": os.environ.get("CONTAINERD17_DIR", f"{_CACHE}/containerd-trixie") + "/root/usr/bin",
    "2.1": os.environ.get("CONTAINERD2_DIR", f"{_CACHE}/containerd-sid") + "/root/usr/bin",
}
# The .ci/setup.d step that puts each there.
SETUP_STEPS = {
    "1.6": "50-imagepull.sh",
    "1.7": "52-containerd-trixie.sh",
    "2.1": "51-containerd-sid.sh",
}
DEFAULT_STATE = "/run/containerd"
DISABLED_CRI = (
    '"io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images"'
)

CONFIG = """\
version = {version}
imports = {imports}
root = "{root}"
state = "{state}"
# The CRI plugin is off unless asked for: 1.6 has it as io.containerd.grpc.v1.cri; 2.x
# split it into io.containerd.cri.v1.runtime and .images, which start (and watch
# /etc/cni/net.d) unless named too. 1.6 ignores the names it does not know.
disabled_plugins = [{disabled}]
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  address = "{sock}.debug"
[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"
{extra}"""


def require(binary: str) -> str:
    if not os.path.exists(binary):
        raise FileNotFoundError(f"{binary} is missing (.ci/setup.d/50-imagepull.sh installs it)")
    return binary


def binary(version: str) -> str:
    """The containerd of `version` (a key of VERSIONS); missing, the error names its step."""
    path = os.path.join(VERSIONS[version], "containerd")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing (.ci/setup.d/{SETUP_STEPS[version]})")
    return path


class ContainerdServer:
    """containerd on a unix socket in `workdir`; `ctr(...)` runs ctr against it."""

    def __init__(
        self, workdir, namespace="k8s.io", bin_dir=None, version=2, extra="", cri=False, imports=()
    ):
        """bin_dir: where containerd and ctr are (default Debian's); `extra` is TOML
        appended to the config (config `version` 2 or 3), e.g. pull settings, imports;
        `cri` keeps the CRI plugin on (its pull settings are then in `config dump`)."""
        self.cri, self.imports = cri, list(imports)
        self.workdir = str(workdir)
        self.containerd = os.path.join(bin_dir, "containerd") if bin_dir else CONTAINERD
        self.ctr_binary = os.path.join(bin_dir, "ctr") if bin_dir else CTR
        self.version, self.extra = version, extra
        self.config = os.path.join(self.workdir, "config.toml")
        # Unix socket paths are limited to 108 bytes: keep it short and inside workdir.
        self.address = os.path.join(self.workdir, "c.sock")
        self.namespace = namespace
        self.proc = None

    def start(self, timeout=30.0):
        os.makedirs(self.workdir, exist_ok=True)
        # containerd 2.x creates /run/containerd at start whatever `state` says, and with its
        # CRI plugins on fills it (io.containerd.grpc.v1.cri, runc, ...): what was there
        # before is kept, what this server added is removed at stop.
        self._default_state_before = (
            set(os.listdir(DEFAULT_STATE)) if os.path.isdir(DEFAULT_STATE) else None
        )
        with open(self.config, "w") as f:
            f.write(
                CONFIG.format(
                    root=os.path.join(self.workdir, "root"),
                    state=os.path.join(self.workdir, "state"),
                    sock=self.address,
                    opt=os.path.join(self.workdir, "opt"),
                    version=self.version,
                    extra=self.extra,
                    imports=json.dumps(self.imports),
                    disabled="" if self.cri else DISABLED_CRI,
                )
            )
        # In "/", as systemd starts it: containerd 1.x resolves a relative import
        # against its working directory.
        self.proc = Proc(
            [require(self.containerd), "--config", self.config],
            os.path.join(self.workdir, "containerd.log"),
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
        if self.proc is None or not os.path.isdir(DEFAULT_STATE):
            return
        # Only what a CRI server adds there, never a socket: another containerd (the e2e
        # cluster's, on the default paths) may have come up since this one started.
        if self.cri:
            for name in set(os.listdir(DEFAULT_STATE)) - (self._default_state_before or set()):
                path = os.path.join(DEFAULT_STATE, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
        if self._default_state_before is None:
            with contextlib.suppress(OSError):
                os.rmdir(DEFAULT_STATE)  # only if empty: then nothing else uses it

    def wipe(self):
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
