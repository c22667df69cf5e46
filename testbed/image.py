"""The exporter's image, built as a user builds it: `make image` (Debian's buildah building
./Dockerfile) for amd64 and arm64, the build stage of both on this host's architecture (only
the arm64 tree's final import check runs under qemu-user, through binfmt_misc).

    python -m testbed.image base        the build stage's base (below), once per machine
    python -m testbed.image build       both architectures from this tree, cached by a hash of
                                        the Dockerfile's inputs and the Makefile's image rule;
                                        prints each docker-archive
    python -m testbed.image cached      each architecture's archive if this tree is built (else
                                        exit 1, naming .ci/setup.d/45-image.sh)
    python -m testbed.image hash        that hash

No container registry is reachable here, so the Dockerfile's default build stage base
(docker.io's debian:bookworm-slim) cannot be pulled: base() makes its stand-in from Debian's
packages, bookworm minbase by mmdebstrap for this host's architecture with the slim image's
dpkg excludes, as BASE_IMAGE, and build() passes it as --build-arg BUILD_IMAGE. Everything
else is the Dockerfile's own: its RUNs install python3, pip and mmdebstrap from Debian and
make the trees for the target architecture. TLS to PyPI from this machine goes
through a proxy whose CA is in the host's bundle, so the build stage's pip is given that
bundle (a bind mount and a pip.conf naming it, RUN-time only: no layer holds them).

Results are kept twice: the images localhost/kube-scale-exporter:HASH-ARCH in buildah's
storage under CACHE/buildah, which push() lists and pushes with `make image-push`; and each
architecture as a docker-archive under CACHE/images named as deploy/ names the image, which
`ctr images import` takes and testbed/container.py runs. The storage is overlay: a --layers
build commits each step as a diff, where vfs copies the whole tree each time (the amd64
build took 319-401 s on vfs, 31 s on overlay); buildah runs with its own containers.conf,
so that it writes no /etc/cni/net.d/cni.lock, and registries.conf.
"""

import fcntl
import hashlib
import json
import os
import pathlib
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
CACHE = pathlib.Path(os.environ.get("KSE_CACHE", "/var/cache/kube-scale-exporter"))
IMAGE_NAME = "docker.io/library/kube-scale-exporter:0.1.0"  # what deploy/ renders
ARCHS = ("amd64", "arm64")
HOST_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]
# The build stage's base: bookworm minbase for this host's architecture, from Debian's packages.
BASE_IMAGE = f"localhost/kse-build-base:bookworm-{HOST_ARCH}"
BASE_SUITE = "bookworm"
BASE_MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
# What Debian's slim images leave out (their dpkg excludes), so the stand-in is that size.
BASE_EXCLUDES = ("doc", "man", "info", "locale", "groff", "lintian", "linda")
# The bundle the host's own pip trusts (Debian's: ca-certificates and any local CA).
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
BUILD_CA = "/etc/ssl/kse-build-ca.crt"
PIP_CONF = f"[global]\ncert = {BUILD_CA}\n"


def storage() -> pathlib.Path:
    return CACHE / "buildah"


def buildah_env() -> dict:
    """The environment buildah and `make image` run in: this storage and configuration."""
    store = storage()
    conf_dir = store / "conf"
    (conf_dir / "tmp").mkdir(parents=True, exist_ok=True)
    conf = conf_dir / "containers.conf"
    conf.write_text(
        "[network]\n"
        f'network_config_dir = "{conf_dir}/cni"\n'
        'cni_plugin_dirs = ["/usr/lib/cni"]\n'
        "[engine]\n"
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
        f'tmp_dir = "{conf_dir}/tmp"\n'
    )
    reg = conf_dir / "registries.conf"
    reg.write_text(
        'unqualified-search-registries = ["docker.io"]\nshort-name-mode = "permissive"\n'
    )
    stor = conf_dir / "storage.conf"
    stor.write_text(
        f'[storage]\ndriver = "overlay"\ngraphroot = "{store}/overlay-storage"\n'
        f'runroot = "{store}/overlay-run"\n'
    )
    return dict(
        os.environ,
        CONTAINERS_CONF=str(conf),
        CONTAINERS_REGISTRIES_CONF=str(reg),
        CONTAINERS_STORAGE_CONF=str(stor),
        BUILDAH_ISOLATION="chroot",
        TMPDIR=str(conf_dir / "tmp"),
    )


def buildah(*args, capture=False, log=None, check=True):
    argv = ["buildah", *args]
    if capture:
        result = subprocess.run(argv, env=buildah_env(), capture_output=True, text=True)
        if check and result.returncode:
            raise RuntimeError(f"buildah {' '.join(args[:2])} failed: {result.stderr[-3000:]}")
        return result.stdout.strip()
    with open(log, "ab") if log else open(os.devnull, "wb") as out:
        result = subprocess.run(argv, env=buildah_env(), stdout=out, stderr=subprocess.STDOUT)
    if check and result.returncode:
        tail = pathlib.Path(log).read_text(errors="replace")[-3000:] if log else ""
        raise RuntimeError(f"buildah {' '.join(args[:2])} failed ({result.returncode}):\n{tail}")
    return result.returncode


def version() -> str:
    """`buildah --version`'s line, for test headers."""
    return subprocess.run(["buildah", "--version"], capture_output=True, text=True).stdout.strip()


def image_exists(name: str) -> bool:
    return buildah("inspect", "--type", "image", name, capture=True, check=False) != ""


def base(log=sys.stderr) -> str:
    """BASE_IMAGE, made once: bookworm minbase by mmdebstrap with the slim image's excludes.
    Every architecture's build stage runs on it (the Dockerfile's FROM --platform=BUILDPLATFORM)."""
    if image_exists(BASE_IMAGE):
        return BASE_IMAGE
    start = time.monotonic()
    excludes = [f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in BASE_EXCLUDES]
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="kse-base.") as tmp:
        tar = pathlib.Path(tmp) / "rootfs.tar"
        argv = ["mmdebstrap", "--quiet", "--variant=minbase", *excludes]
        subprocess.run([*argv, BASE_SUITE, str(tar), *BASE_MIRRORS], check=True)
        ctr = buildah("from", "--pull=never", "scratch", capture=True)
        try:
            buildah("add", ctr, str(tar), "/", capture=True)
            buildah("config", "--arch", HOST_ARCH, "--os", "linux", "--cmd", "bash", ctr)
            buildah("commit", "--quiet", ctr, BASE_IMAGE, capture=True)
        finally:
            buildah("rm", ctr, capture=True)
    print(f"image: {BASE_IMAGE} made in {time.monotonic() - start:.0f}s", file=log)
    return BASE_IMAGE


def instructions(path) -> list[tuple[str, str]]:
    """A Dockerfile's (INSTRUCTION, argument text) pairs, continuations joined, comments
    dropped."""
    out, pending = [], ""
    for raw in pathlib.Path(path).read_text().splitlines():
        if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if raw.endswith("\\"):
            pending += raw[:-1] + " "
            continue
        full, pending = pending + raw, ""
        word, _, rest = full.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def stages(path) -> list[tuple[str | None, list[tuple[str, str]]]]:
    """Instructions grouped by FROM (each group starts with its FROM); the global ARGs come
    first, under the name None."""
    groups = [(None, [])]
    for word, rest in instructions(path):
        if word == "FROM":
            parts = [part for part in rest.split() if not part.startswith("--")]  # --platform
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            groups.append((name, []))
        groups[-1][1].append((word, rest))
    return groups


def copied(steps) -> list[tuple[list[str], str]]:
    """The (sources, destination) of a stage's COPY lines from the context."""
    out = []
    for word, rest in steps:
        if word == "COPY" and not rest.startswith("--from="):
            *sources, dest = rest.split()
            out.append((sources, dest))
    return out


def dockerfile(repo: pathlib.Path = REPO) -> tuple[list, list]:
    """The steps of the Dockerfile's build stage and of its final stage."""
    groups = stages(repo / "Dockerfile")
    assert [name for name, _ in groups] == [None, "build", None], "a build stage, then the image"
    return groups[1][1], groups[2][1]


def image_inputs(repo: pathlib.Path = REPO) -> list[str]:
    """The Dockerfile and what its build stage copies from the context."""
    build_steps, _ = dockerfile(repo)
    return ["Dockerfile", *(src for sources, _ in copied(build_steps) for src in sources)]


def _files(path: pathlib.Path) -> list[pathlib.Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def make_rule(repo: pathlib.Path = REPO) -> str:
    """The Makefile's `image` rule and the variables it reads, as written."""
    text = (repo / "Makefile").read_text()
    rule = re.search(r"^image:\n(?:\t.*\n)+", text, re.M)
    assert rule, "Makefile: no image rule"
    names = ("VERSION", "ARCHS", "BUILDAH", "BUILD_FLAGS", "BUILD_PLATFORM")
    variables = [m[0] for m in re.finditer(rf"^(?:{'|'.join(names)}) [:?]?=.*$", text, re.M)]
    return "\n".join(variables) + "\n" + rule[0]


def inputs_hash(repo: pathlib.Path = REPO) -> str:
    """sha256 over the Dockerfile's inputs (paths and bytes, __pycache__ left out), the
    Makefile's image rule and the flags build_flags() adds."""
    h = hashlib.sha256()
    for name in image_inputs(repo):
        for f in _files(repo / name):
            h.update(str(f.relative_to(repo)).encode() + b"\0")
            h.update(f.read_bytes() + b"\0")
    h.update(make_rule(repo).encode() + b"\0")
    h.update((shlex.join(build_flags(pathlib.Path("pip.conf"))) + PIP_CONF).encode())
    return h.hexdigest()[:16]


def archive(digest: str, arch: str) -> pathlib.Path:
    return CACHE / "images" / f"kube-scale-exporter-{digest}-{arch}.tar"


def build_flags(pip_conf: pathlib.Path) -> list[str]:
    """`buildah build` flags beyond the Dockerfile: the build stage's base, and the host's CA
    bundle for its pip (RUN-time mounts; `pip_conf` holds PIP_CONF)."""
    return [
        f"--build-arg=BUILD_IMAGE={BASE_IMAGE}",
        "--pull=never",
        f"--volume={HOST_CA_BUNDLE}:{BUILD_CA}:ro",
        f"--volume={pip_conf}:/etc/pip.conf:ro",
    ]


def make_image(image: str, log: pathlib.Path, archs=ARCHS) -> dict[str, float]:
    """`make image IMAGE=image ARCHS=...` in this storage, its output appended to `log`;
    returns each architecture's build time in seconds, as the target prints it."""
    start = log.stat().st_size if log.exists() else 0
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="kse-image.") as tmp:
        pip_conf = pathlib.Path(tmp) / "pip.conf"
        pip_conf.write_text(PIP_CONF)
        flags = shlex.join(build_flags(pip_conf))
        argv = ["make", "--no-print-directory", "-C", str(REPO), "image", f"IMAGE={image}"]
        argv += [f"ARCHS={' '.join(archs)}", f"BUILD_FLAGS={flags}"]
        try:
            base()
            with open(log, "ab") as out:
                result = subprocess.run(
                    argv, env=buildah_env(), stdout=out, stderr=subprocess.STDOUT
                )
        finally:
            # The list goes at once, the images stay: buildah 1.28's `images` fails while a
            # list lacks this host's platform or an image it names.
            remove(image)
    with open(log, "rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    if result.returncode:
        raise RuntimeError(f"make image failed ({result.returncode}), {log}:\n{text[-3000:]}")
    return {a: float(t) for a, t in re.findall(r"image: \S+-(\w+) built in (\d+) s", text)}


def build(arch: str = HOST_ARCH, repo: pathlib.Path = REPO, log=sys.stderr) -> pathlib.Path:
    """The docker-archive of `arch`'s image from this tree (IMAGE_NAME inside), built by `make
    image ARCHS=arch` unless this tree's inputs were built before: a test or the e2e that
    runs one architecture waits for that one only. The build's log goes to
    CACHE/images/build-HASH.log."""
    return build_all((arch,), repo, log)[arch]


def build_all(archs=ARCHS, repo: pathlib.Path = REPO, log=sys.stderr) -> dict:
    """{arch: docker-archive} for each of `archs`, the missing ones built in one `make image`."""
    digest = inputs_hash(repo)
    if all(archive(digest, a).exists() for a in archs):
        return {a: archive(digest, a) for a in archs}
    (CACHE / "images").mkdir(parents=True, exist_ok=True)
    # One build at a time (pytest-xdist workers, a bench beside a test): the next one waits
    # and then finds the archives.
    with open(CACHE / "images" / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_locked(archs, digest, log)


def _build_locked(archs, digest: str, log) -> dict:
    missing = [a for a in archs if not archive(digest, a).exists()]
    if missing:
        name = f"localhost/kube-scale-exporter:{digest}"
        build_log = CACHE / "images" / f"build-{digest}.log"
        times = make_image(name, build_log, missing)
        for a in missing:
            tmp = archive(digest, a).with_suffix(".tmp")
            tmp.unlink(missing_ok=True)
            buildah(
                "push", "--quiet", f"{name}-{a}", f"docker-archive:{tmp}:{IMAGE_NAME}", capture=True
            )
            tmp.rename(archive(digest, a))
        forget_older(digest)
        took = ", ".join(f"{a} {t:.0f}s" for a, t in times.items())
        print(f"image: {name} built ({took}), log {build_log}", file=log)
    return {a: archive(digest, a) for a in archs}


def push(target: str, archs=ARCHS, repo: pathlib.Path = REPO) -> str:
    """`make image-push IMAGE=target` of this tree's images for `archs` (built where
    missing), as if `make image IMAGE=target` had built them: the list `target` of
    `target-ARCH`; to a plain-HTTP registry on loopback (--tls-verify=false). Returns
    make's output."""
    digest = inputs_hash(repo)
    name = f"localhost/kube-scale-exporter:{digest}"
    for a in archs:  # an archive that outlived its image in the storage: build again
        if not image_exists(f"{name}-{a}"):
            archive(digest, a).unlink(missing_ok=True)
    build_all(archs, repo)
    try:
        buildah("manifest", "create", target, capture=True)
        for a in archs:
            buildah("tag", f"{name}-{a}", f"{target}-{a}", capture=True)
            buildah("manifest", "add", target, f"containers-storage:{target}-{a}", capture=True)
        argv = ["make", "--no-print-directory", "-C", str(repo), "image-push"]
        argv += [f"IMAGE={target}", "PUSH_FLAGS=--tls-verify=false"]
        result = subprocess.run(
            argv, env=buildah_env(), capture_output=True, text=True, timeout=900
        )
    finally:
        for tagged in (target, *(f"{target}-{a}" for a in archs)):
            remove(tagged)
    if result.returncode:
        raise RuntimeError(f"make image-push failed:\n{result.stdout}{result.stderr}"[-3000:])
    return result.stdout + result.stderr


def remove(name: str) -> None:
    """Untag `name`: a manifest list (ours is named without an architecture) with `manifest
    rm`, an image (NAME-ARCH) with rmi. Never rmi a list's name: buildah 1.28 resolves it to
    the list's image for this host and removes that instead."""
    if name.rsplit("-", 1)[-1] in ARCHS:
        buildah("rmi", name, capture=True, check=False)
    else:
        buildah("manifest", "rm", name, capture=True, check=False)


def forget_older(digest: str) -> None:
    """Other trees' builds leave buildah's storage once their archives are half an hour old
    (the archives stay, as before), with every image no tag needs: each step of a --layers
    build is an image, so none is kept for the next build (the disk stays bounded; a build
    takes a few minutes). A build still running beside this one keeps its images."""
    listing = buildah("images", "--format", "{{.Name}}:{{.Tag}}", capture=True, check=False)
    for name in listing.split():  # empty while another build's list is half made
        repo_, _, tag = name.rpartition(":")
        other = tag.split("-")[0]
        if repo_ != "localhost/kube-scale-exporter" or other == digest:
            continue
        done = [archive(other, a) for a in ARCHS if archive(other, a).exists()]
        if done and all(time.time() - p.stat().st_mtime > 1800 for p in done):
            remove(name)
    for _ in range(20):  # each pass removes the untagged images nothing is built on
        if not buildah("rmi", "--prune", capture=True, check=False):
            break


def binary_archive(
    stem: str,
    name: str,
    files,
    *,
    entrypoint,
    user: str,
    description: str,
    workdir: str | None = None,
    log=sys.stderr,
) -> pathlib.Path:
    """`name` as a docker-archive under CACHE/images: `files` on an empty base, (host path,
    path in the image) pairs copied 0755, run
    as `user` with `entrypoint` and no default arguments. Cached by a hash of all of these
    and the files' bytes."""
    files = [(str(src), dest) for src, dest in files]
    recipe = [name, "scratch", list(entrypoint), user, workdir, description]
    recipe.append([dest for _, dest in files])
    h = hashlib.sha256(json.dumps(recipe).encode())
    for src, _ in files:
        h.update(pathlib.Path(src).read_bytes())
    digest = h.hexdigest()[:16]
    archive = CACHE / "images" / f"{stem}-{digest}.tar"
    if archive.exists():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    ctr = buildah("from", "--pull=never", "scratch", capture=True)
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
        print(base())
    elif argv[:1] == ["build"]:
        print("\n".join(map(str, build_all().values())))
    elif argv[:1] == ["cached"]:
        paths = [archive(inputs_hash(), a) for a in ARCHS]
        if not all(p.exists() for p in paths):
            print(
                "the image of this tree is not built: run .ci/setup.d/45-image.sh", file=sys.stderr
            )
            return 1
        print("\n".join(map(str, paths)))
    elif argv[:1] == ["hash"]:
        print(inputs_hash())
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
