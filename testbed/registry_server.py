"""A real Docker registry (Debian's docker-registry) on loopback, filesystem storage.

`push_image` builds an OCI image with fresh random layers (so no earlier test's blob can
be reused from containerd's content store) and pushes it with the registry HTTP API.
"""

import hashlib
import io
import json
import os
import tarfile

import requests

from .ports import free_port
from .procs import Proc, start_on_free_port, wait_for_port

REGISTRY = "/usr/bin/docker-registry"

CONFIG = """\
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {root}
http:
  addr: 127.0.0.1:{port}
{tls}{proxy}"""
# A pull-through cache: what it does not hold it fetches from this registry.
PROXY = "proxy:\n  remoteurl: {url}\n"
TLS = "  tls:\n    certificate: {cert}\n    key: {key}\n"


LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def random_layer(size: int) -> bytes:
    """An uncompressed tar holding one file of `size` random bytes (incompressible)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo("data")
        info.size = size
        tar.addfile(info, io.BytesIO(os.urandom(size)))
    return buf.getvalue()


class RegistryServer:
    def __init__(self, workdir, port=None, proxy_remote=None, prefix=(), tls=None):
        """proxy_remote: the URL of the registry this one caches (a pull-through cache);
        `prefix` runs it under another command (`nsenter --net=NETNS`: give it a `port`,
        a port free here says nothing of the namespace's); `tls`: (certificate, key) to
        serve HTTPS with."""
        self.workdir = str(workdir)
        self.prefix = list(prefix)
        self.tls = tls
        self.proxy_remote = proxy_remote
        self._fixed_port = port
        self._use_port(port or free_port())
        self.proc = None

    def _use_port(self, port):
        self.port = port
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"{'https' if self.tls else 'http'}://{self.host}"

    def start(self):
        if not os.path.exists(REGISTRY):
            raise FileNotFoundError(
                f"{REGISTRY} is missing (.ci/setup.d/50-containerd.sh installs it)"
            )
        os.makedirs(self.workdir, exist_ok=True)
        config = os.path.join(self.workdir, "registry.yml")

        def start(port):
            self._use_port(port)
            with open(config, "w") as f:
                proxy = PROXY.format(url=self.proxy_remote) if self.proxy_remote else ""
                storage = os.path.join(self.workdir, "storage")
                tls = TLS.format(cert=self.tls[0], key=self.tls[1]) if self.tls else ""
                f.write(CONFIG.format(root=storage, port=port, proxy=proxy, tls=tls))
            log = os.path.join(self.workdir, f"registry-{port}.log")
            self.log_path = log
            return Proc([*self.prefix, REGISTRY, "serve", config], log)

        if self._fixed_port:
            self.proc = start(self._fixed_port)
            wait_for_port(self.port, proc=self.proc)
        else:
            self.proc, _ = start_on_free_port(start)
        return self

    def push_blob(self, repo: str, data: bytes) -> str:
        digest = sha256(data)
        start = requests.post(f"{self.url}/v2/{repo}/blobs/uploads/", timeout=30)
        start.raise_for_status()
        location = start.headers["Location"]
        if location.startswith("/"):
            location = self.url + location
        sep = "&" if "?" in location else "?"
        done = requests.put(
            f"{location}{sep}digest={digest}",
            data=data,
            timeout=120,
            headers={"Content-Type": "application/octet-stream"},
        )
        done.raise_for_status()
        return digest

    def push_image(self, repo: str, tag: str, layer_sizes) -> dict:
        """Push an image with one fresh random layer per size; returns its digests."""
        layers = []
        diff_ids = []
        for size in layer_sizes:
            data = random_layer(size)
            layers.append(
                {"mediaType": LAYER_TYPE, "digest": self.push_blob(repo, data), "size": len(data)}
            )
            diff_ids.append(sha256(data))
        config = json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": {},
                "rootfs": {"type": "layers", "diff_ids": diff_ids},
            }
        ).encode()
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": MANIFEST_TYPE,
                "config": {
                    "mediaType": CONFIG_TYPE,
                    "digest": self.push_blob(repo, config),
                    "size": len(config),
                },
                "layers": layers,
            }
        ).encode()
        put = requests.put(
            f"{self.url}/v2/{repo}/manifests/{tag}",
            data=manifest,
            timeout=30,
            headers={"Content-Type": MANIFEST_TYPE},
        )
        put.raise_for_status()
        return {
            "manifest": sha256(manifest),
            "layers": [layer["digest"] for layer in layers],
            "layer_sizes": [layer["size"] for layer in layers],
            "size": sum(layer["size"] for layer in layers) + len(config) + len(manifest),
        }

    def requests_from(self, agent: str, repo: str) -> list[str]:
        """The access log's lines (combined log format, written whatever the log level)
        for `repo` whose user agent starts with `agent` (containerd's: `containerd/`)."""
        with open(self.log_path, errors="replace") as f:
            return [
                line
                for line in f
                if f'"{agent}' in line
                and f" /v2/{repo}/" in line
                and ('"GET ' in line or '"HEAD ' in line)
            ]

    def stop(self):
        if self.proc:
            self.proc.stop()
