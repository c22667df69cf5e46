"""The exporter's image, built from the working tree's Dockerfile with Debian's buildah, for a
real kubelet.

    python -m testbed.image build       kube-scale-exporter:0.1.0 from ./Dockerfile (cached
                                        by a hash of its inputs); prints the archive path

No public registry is reachable here, so build() reads the Dockerfile rather than handing it
to an engine: the build stage's last RUN (tools/image_tree.py, which makes the image's
trees) runs on this host in a copy of what the stage COPYs, and the final stage's `COPY
--from=build` trees and config are committed with `buildah from scratch`. Results are
docker-archive tarballs under CACHE, which `ctr -n k8s.io images import` takes.

buildah keeps its own storage under CACHE/buildah (vfs: works on any filesystem), its own
containers.conf (so it writes no /etc/cni/net.d/cni.lock) and registries.conf.
"""

import hashlib
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
CACHE = pathlib.Path(os.environ.get("KSE_CACHE", "/var/cache/kube-scale-exporter"))
IMAGE_NAME = "docker.io/library/kube-scale-exporter:0.1.0"


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
            parts = rest.split()
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


def inputs_hash(repo: pathlib.Path = REPO) -> str:
    """sha256 over the Dockerfile's inputs (paths and bytes, __pycache__ left out)."""
    h = hashlib.sha256()
    for name in image_inputs(repo):
        for f in _files(repo / name):
            h.update(str(f.relative_to(repo)).encode() + b"\0")
            h.update(f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def build_context(repo: pathlib.Path, steps, workdir: pathlib.Path) -> None:
    """What the build stage's COPY lines place in its WORKDIR, placed in `workdir`."""
    for sources, dest in copied(steps):
        for source in sources:
            src = repo / source
            target = workdir / dest / src.name if dest.endswith("/") else workdir / dest
            target.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(src, target)


def image_config(steps) -> list[str]:
    """`buildah config` options for the final stage's ARG, LABEL, ENV, USER, EXPOSE and
    ENTRYPOINT."""
    args = dict(rest.split("=", 1) for word, rest in steps if word == "ARG" and "=" in rest)
    config = []
    for word, rest in steps:
        for name, value in args.items():
            rest = rest.replace("${" + name + "}", value)
        if word in ("LABEL", "ENV"):
            for pair in shlex.split(rest):
                config += [f"--{word.lower()}", pair]
        elif word == "USER":
            config += ["--user", rest]
        elif word == "EXPOSE":
            config += ["--port", rest]
        elif word == "ENTRYPOINT":
            config += ["--entrypoint", rest, "--cmd", "[]"]
    return config


def build(repo: pathlib.Path = REPO, log=sys.stderr) -> pathlib.Path:
    """kube-scale-exporter:0.1.0 from the working tree's Dockerfile, as a docker-archive
    (cached). The build stage's last RUN makes the image's trees on this host (its earlier
    RUN installs mmdebstrap, which .ci/setup.d/46-e2e.sh installs here); each `COPY
    --from=build TREE /` of the final stage is one layer on an empty base, then the final
    stage's config."""
    digest = inputs_hash(repo)
    archive = CACHE / "images" / f"kube-scale-exporter-{digest}.tar"
    if archive.exists():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    build_steps, final_steps = dockerfile(repo)
    *make_trees, out = shlex.split([rest for word, rest in build_steps if word == "RUN"][-1])
    layers = [
        rest.split()[1:] for word, rest in final_steps if word == "COPY" and "--from=build" in rest
    ]
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="kse-image.") as tmp:
        workdir, trees = pathlib.Path(tmp) / "src", pathlib.Path(tmp) / "trees"
        workdir.mkdir()
        build_context(repo, build_steps, workdir)
        argv = [sys.executable if w == "python" else w for w in make_trees]
        subprocess.run([*argv, str(trees)], cwd=workdir, check=True)
        parent, tags = "scratch", []
        for i, (tree, dest) in enumerate(layers):
            assert dest == "/" and tree.startswith(out + "/"), f"COPY --from=build {tree} {dest}"
            ctr = buildah("from", "--pull=never", parent, capture=True)
            try:
                buildah("copy", ctr, f"{trees / os.path.relpath(tree, out)}/.", "/", capture=True)
                if i == len(layers) - 1:
                    buildah("config", *image_config(final_steps), ctr)
                last = i == len(layers) - 1
                parent = (
                    f"localhost/kube-scale-exporter:{digest}"
                    if last
                    else f"localhost/kse-image-{digest}:layer{i}"
                )
                buildah("commit", "--quiet", ctr, parent, capture=True)
                tags.append(parent)
            finally:
                buildah("rm", ctr, capture=True)
    tmp = archive.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    buildah("push", "--quiet", parent, f"docker-archive:{tmp}:{IMAGE_NAME}", capture=True)
    tmp.rename(archive)
    for tag in reversed(tags):
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
    if argv[:1] == ["build"]:
        print(build())
    elif argv[:1] == ["hash"]:
        print(inputs_hash())
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
