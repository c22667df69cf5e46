"""The exporter's image, built from the working tree with Debian's buildah, for a real kubelet.

    python -m testbed.image base        the python:3.11-slim-bookworm stand-in (cached)
    python -m testbed.image build       kube-scale-exporter:0.1.0 from ./Dockerfile (cached
                                        by a hash of its inputs); prints the archive path

No public registry is reachable here, so the Dockerfile's base image is a stand-in made with
mmdebstrap: bookworm minbase + python3, python-is-python3, ca-certificates, netbase,
tzdata, and pip/setuptools/wheel from PyPI in /usr/local (as the official image has them),
committed under the official name with `buildah from scratch`. Then `buildah bud
--pull=never --network host` builds the Dockerfile unchanged; the build stage's `pip wheel`
reaches PyPI through this machine's TLS interception, so the host's CA bundle is
bind-mounted over the image's for the build only. Results are docker-archive tarballs under
CACHE, which `ctr -n k8s.io images import` takes.

buildah keeps its own storage under CACHE/buildah (vfs: works on any filesystem), its own
containers.conf (so it writes no /etc/cni/net.d/cni.lock) and registries.conf.
"""

import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
CACHE = pathlib.Path(os.environ.get("KSE_CACHE", "/var/cache/kube-scale-exporter"))
BASE_NAME = "docker.io/library/python:3.11-slim-bookworm"
IMAGE_NAME = "docker.io/library/kube-scale-exporter:0.1.0"
BASE_PACKAGES = ("python3", "python-is-python3", "ca-certificates", "netbase", "tzdata")
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"
# What `COPY` in the Dockerfile reads: the image's content hash covers exactly these.
IMAGE_INPUTS = ("Dockerfile", "pyproject.toml", "README.md", "kube_scale_exporter")


def _buildah_env(work: pathlib.Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    conf = work / "containers.conf"
    conf.write_text(
        "[network]\n"
        f'network_config_dir = "{work}/cni"\n'
        'cni_plugin_dirs = ["/usr/lib/cni"]\n'
        "[engine]\n"
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
        f'tmp_dir = "{work}/tmp"\n'
    )
    reg = work / "registries.conf"
    reg.write_text(
        'unqualified-search-registries = ["docker.io"]\nshort-name-mode = "permissive"\n'
    )
    env = dict(
        os.environ,
        CONTAINERS_CONF=str(conf),
        CONTAINERS_REGISTRIES_CONF=str(reg),
        BUILDAH_ISOLATION="chroot",
        TMPDIR=str(work / "tmp"),
    )
    (work / "tmp").mkdir(exist_ok=True)
    return env


def buildah(*args, capture=False, log=None):
    store = CACHE / "buildah"
    env = _buildah_env(store / "conf")
    argv = [
        "buildah",
        "--root",
        str(store / "storage"),
        "--runroot",
        str(store / "run"),
        "--storage-driver",
        "vfs",
        *args,
    ]
    if capture:
        return subprocess.run(
            argv, env=env, check=True, capture_output=True, text=True
        ).stdout.strip()
    with open(log, "ab") if log else open(os.devnull, "wb") as out:
        result = subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    if result.returncode:
        tail = pathlib.Path(log).read_text(errors="replace")[-3000:] if log else ""
        raise RuntimeError(f"buildah {' '.join(args[:2])} failed ({result.returncode}):\n{tail}")


def _image_exists(name: str) -> bool:
    try:
        buildah("inspect", "--type", "image", name, capture=True)
        return True
    except subprocess.CalledProcessError:
        return False


def base_image(log=sys.stderr) -> str:
    """The stand-in python:3.11-slim-bookworm in buildah's storage (built once)."""
    if _image_exists(BASE_NAME):
        return BASE_NAME
    start = time.monotonic()
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="kse-base.") as tmp:
        tmp = pathlib.Path(tmp)
        rootfs = tmp / "rootfs"
        mirrors = [
            "deb http://deb.debian.org/debian bookworm main",
            "deb http://deb.debian.org/debian bookworm-updates main",
            "deb http://deb.debian.org/debian-security bookworm-security main",
        ]
        subprocess.run(
            [
                "mmdebstrap",
                "--quiet",
                "--variant=minbase",
                "--include=" + ",".join(BASE_PACKAGES),
                "--dpkgopt=path-exclude=/usr/share/doc/*",
                "--dpkgopt=path-exclude=/usr/share/man/*",
                "--dpkgopt=path-exclude=/usr/share/locale/*",
                "bookworm",
                str(rootfs),
                *mirrors,
            ],
            check=True,
        )
        # pip, setuptools and wheel from PyPI into /usr/local, as the official image has them.
        wheels = tmp / "wheels"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--only-binary=:all:",
                "--dest",
                str(wheels),
                "pip",
                "setuptools",
                "wheel",
            ],
            check=True,
            env=dict(os.environ, PIP_FIND_LINKS=""),
        )
        (rootfs / "wheels").mkdir()
        for whl in wheels.iterdir():
            shutil.copy(whl, rootfs / "wheels" / whl.name)
        pip_whl = next(w.name for w in wheels.iterdir() if w.name.startswith("pip-"))
        (rootfs / "usr/lib/python3.11/EXTERNALLY-MANAGED").unlink(missing_ok=True)
        subprocess.run(
            [
                "/usr/sbin/chroot",
                str(rootfs),
                "python3",
                f"/wheels/{pip_whl}/pip",
                "install",
                "-q",
                "--no-index",
                "--no-cache-dir",
                "--find-links=/wheels",
                "pip",
                "setuptools",
                "wheel",
            ],
            check=True,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8"},
        )
        shutil.rmtree(rootfs / "wheels")
        # What the Dockerfile relies on: `python -m pip` from /usr/local.
        subprocess.run(
            ["/usr/sbin/chroot", str(rootfs), "python", "-m", "pip", "--version"],
            check=True,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root"},
        )
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for p in (rootfs / junk).glob("*"):
                if p.is_file():
                    p.unlink()
        ctr = buildah("from", "--pull=never", "scratch", capture=True)
        try:
            mnt = buildah("mount", ctr, capture=True)
            subprocess.run(["cp", "-a", f"{rootfs}/.", mnt], check=True)
            buildah("umount", ctr)
            buildah(
                "config",
                "--env",
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--env",
                "LANG=C.UTF-8",
                "--cmd",
                "python3",
                "--label",
                "org.opencontainers.image.description=stand-in for python:3.11-slim-bookworm "
                "(mmdebstrap, testbed/image.py)",
                ctr,
            )
            buildah("commit", "--quiet", ctr, BASE_NAME, capture=True)
        finally:
            buildah("rm", ctr, capture=True)
    print(f"image: base {BASE_NAME} built in {time.monotonic() - start:.0f}s", file=log)
    return BASE_NAME


def inputs_hash(repo: pathlib.Path = REPO) -> str:
    """sha256 over the Dockerfile's inputs (paths and bytes, __pycache__ left out)."""
    h = hashlib.sha256()
    for name in IMAGE_INPUTS:
        path = repo / name
        files = (
            [path]
            if path.is_file()
            else sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        )
        for f in files:
            h.update(str(f.relative_to(repo)).encode() + b"\0")
            h.update(f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def build(repo: pathlib.Path = REPO, log=sys.stderr) -> pathlib.Path:
    """kube-scale-exporter:0.1.0 from the working tree as a docker-archive (cached)."""
    digest = inputs_hash(repo)
    archive = CACHE / "images" / f"kube-scale-exporter-{digest}.tar"
    if archive.exists():
        return archive
    base_image(log)
    archive.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    build_log = CACHE / "images" / f"build-{digest}.log"
    build_log.unlink(missing_ok=True)
    tag = f"localhost/kube-scale-exporter:{digest}"
    # The same context `docker build .` would send: only the Dockerfile's inputs.
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="kse-ctx.") as ctx:
        for name in IMAGE_INPUTS:
            src = repo / name
            if src.is_dir():
                shutil.copytree(
                    src, pathlib.Path(ctx) / name, ignore=shutil.ignore_patterns("__pycache__")
                )
            else:
                shutil.copy(src, ctx)
        buildah(
            "bud",
            "--pull=never",
            "--network",
            "host",
            "--layers=false",
            "--volume",
            f"{HOST_CA}:/etc/ssl/certs/ca-certificates.crt:ro",
            "-t",
            tag,
            "-f",
            f"{ctx}/Dockerfile",
            ctx,
            log=build_log,
        )
    tmp = archive.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    buildah("push", "--quiet", tag, f"docker-archive:{tmp}:{IMAGE_NAME}", log=build_log)
    tmp.rename(archive)
    buildah("rmi", tag, capture=True)
    print(f"image: {IMAGE_NAME} built in {time.monotonic() - start:.0f}s -> {archive}", file=log)
    return archive


def binary_archive(
    stem: str,
    name: str,
    files,
    *,
    entrypoint,
    user: str,
    description: str,
    base: str = "scratch",
    workdir: str | None = None,
    log=sys.stderr,
) -> pathlib.Path:
    """`name` as a docker-archive under CACHE/images: `base` ("scratch", or BASE_NAME, which
    base_image builds) plus `files`, (host path, path in the image) pairs copied 0755, run
    as `user` with `entrypoint` and no default arguments. Cached by a hash of all of these
    and the files' bytes."""
    files = [(str(src), dest) for src, dest in files]
    recipe = [name, base, list(entrypoint), user, workdir, description]
    recipe.append([dest for _, dest in files])
    h = hashlib.sha256(json.dumps(recipe).encode())
    for src, _ in files:
        h.update(pathlib.Path(src).read_bytes())
    digest = h.hexdigest()[:16]
    archive = CACHE / "images" / f"{stem}-{digest}.tar"
    if archive.exists():
        return archive
    if base != "scratch":
        base_image(log)
    archive.parent.mkdir(parents=True, exist_ok=True)
    ctr = buildah("from", "--pull=never", base, capture=True)
    try:
        for src, dest in files:
            buildah("copy", "--chmod", "0755", ctr, src, dest, capture=True)
        config = ["--entrypoint", json.dumps(list(entrypoint)), "--cmd", "[]", "--user", user]
        config += ["--label", f"org.opencontainers.image.description={description}"]
        if workdir:
            config += ["--workingdir", workdir]
        buildah("config", *config, ctr)
        buildah("commit", "--quiet", ctr, name, capture=True)
    finally:
        buildah("rm", ctr, capture=True)
    tmp = archive.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    buildah("push", "--quiet", name, f"docker-archive:{tmp}:{name}")
    tmp.rename(archive)
    buildah("rmi", name, capture=True)
    print(f"image: {name} -> {archive}", file=log)
    return archive


def pause_archive(pause_bin: str, name: str, log=sys.stderr) -> pathlib.Path:
    """The pod sandbox image: the statically linked pause binary alone, as /pause."""
    return binary_archive(
        "pause",
        name,
        [(pause_bin, "/pause")],
        entrypoint=["/pause"],
        user="65535:65535",
        description="the pod sandbox: pause.c of the Kubernetes release (testbed/image.py)",
        log=log,
    )


def main(argv):
    if argv[:1] == ["base"]:
        print(base_image())
    elif argv[:1] == ["build"]:
        print(build())
    elif argv[:1] == ["hash"]:
        print(inputs_hash())
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
