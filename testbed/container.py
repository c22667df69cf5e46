"""An image's docker-archive run as deploy/ runs its pods, without a container engine: its
layers unpacked in order, the root filesystem read-only, the image's USER (setuid from
root leaves no capability, as `drop: [ALL]` does), its Env and Entrypoint, /proc, /sys and
/dev as a runtime gives them, and host paths bind-mounted read-only where volumes would be.
Everything is mounted in a mount namespace of the process's own, gone when it exits.
"""

from __future__ import annotations

import io
import json
import pathlib
import shlex
import subprocess
import tarfile

RUNTIME_MOUNTS = ("proc", "sys", "dev")
# tarfile's "tar" filter (no absolute paths, no links out of the root) where the interpreter
# has one: Python 3.11.4 and later. Debian bookworm's 3.11.2, which the node benches run on
# to measure the image's interpreter, has none; the archives are this repository's builds.
TAR_FILTER = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}


def manifest(archive) -> tuple[dict, list[bytes]]:
    """(the image's config, each layer's uncompressed tar) of a docker-archive."""
    with tarfile.open(archive) as tar:
        (entry,) = json.load(tar.extractfile("manifest.json"))
        config = json.load(tar.extractfile(entry["Config"]))
        return config, [tar.extractfile(layer).read() for layer in entry["Layers"]]


def unpack(archive, root: pathlib.Path) -> dict:
    """The layers of `archive` extracted into `root` in order (owners and modes kept); returns
    the image's config."""
    config, layers = manifest(archive)
    root.mkdir(parents=True, exist_ok=True)
    for data in layers:
        with tarfile.open(fileobj=io.BytesIO(data)) as layer:
            assert not any(pathlib.PurePath(m.name).name.startswith(".wh.") for m in layer), (
                "whiteouts: a layer removes what one below it added"
            )
            layer.extractall(root, **TAR_FILTER)
    return config


def start(root: pathlib.Path, config: dict, args, *, env=None, volumes=None, stdout=None):
    """The image's Entrypoint with `args` in `root`, as its User; `volumes` maps host paths
    to paths in the image, mounted read-only. Returns the Popen of the exporter itself (sh,
    unshare and chroot exec into it)."""
    volumes = volumes or {}
    script = [f"mount --bind {root} {root}"]
    for name in RUNTIME_MOUNTS:
        (root / name).mkdir(exist_ok=True)
    script += [f"mount -t proc proc {root}/proc", f"mount --rbind /sys {root}/sys"]
    script += [f"mount --rbind /dev {root}/dev"]
    for host, inside in volumes.items():
        target = root / inside.lstrip("/")
        if pathlib.Path(host).is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()
        script += [f"mount --bind {shlex.quote(str(host))} {shlex.quote(str(target))}"]
        script += [f"mount -o remount,bind,ro {shlex.quote(str(target))}"]
    script += [f"mount -o remount,bind,ro {root}"]
    image = config["config"]
    command = [*image["Entrypoint"], *args]
    script += [f"exec chroot --userspec={image['User']} {root} {shlex.join(command)}"]
    environ = dict(kv.split("=", 1) for kv in image.get("Env", []))
    environ.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    environ.update(env or {})
    argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c"]
    argv += [" && ".join(script)]
    return subprocess.Popen(
        argv,
        env=environ,
        stdout=stdout or subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd="/",
    )
