"""The exporter's image size: a minimal base built here from Debian's packages, layer by layer,
beside the Dockerfile's image and peers' binaries on an empty base.

The minimal image, built with buildah from scratch (own storage and tags under --work, never
the e2e's in /var/cache):
  layer 1  the interpreter: bookworm's python3.11-minimal and libpython3.11-stdlib unpacked
           by mmdebstrap (no dpkg, apt, shell or maintainer scripts run), less what
           DROP_PATHS lists: docs, locales, dpkg, glibc's iconv modules, and the stdlib
           modules and libraries nothing in the package imports (tests, tkinter, sqlite3,
           dbm, curses, readline, nis and the libraries only they link)
  layer 2  the dependencies' wheels (pip install --target, cp311 manylinux)
  layer 3  the package itself
each byte-compiled. Sizes are the uncompressed tar of each layer (what `buildah push
docker-archive:` writes, which `ctr images import` takes) and, gzip'd, what a registry
serves. Peers: node_exporter and kube-state-metrics binaries as built or unpacked here, each
alone on an empty base: a floor for their published images (which add busybox or
distroless files). Results: bench/results/image_size.md.

Run as root: python -m bench.image_size [--work DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import re
import tarfile
import time
import urllib.request
from pathlib import Path

from bench import versions
from testbed import image
from testbed.ports import free_port

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench/results/image_size.md"
TARGET_MB = 60
FLEET_NODES = 7_500
SUITE = "bookworm"
MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
PACKAGES = ("python3.11-minimal", "libpython3.11-stdlib")
PY = "usr/lib/python3.11"
LIBS = "usr/lib/x86_64-linux-gnu"
# Nothing the exporter imports or reads: smoke() runs it in both modes in the built tree.
DROP_PATHS = (
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
    "usr/share/dpkg",
    "var/lib/dpkg",
    "etc/dpkg",
    "usr/bin/dpkg*",
    "usr/bin/update-alternatives",
    "usr/sbin/*",
    f"{LIBS}/gconv",
    f"{PY}/test",
    f"{PY}/idlelib",
    f"{PY}/tkinter",
    f"{PY}/turtledemo",
    f"{PY}/turtle.py",
    f"{PY}/lib2to3",
    f"{PY}/ensurepip",
    f"{PY}/pydoc_data",
    f"{PY}/pydoc.py",
    f"{PY}/distutils",
    f"{PY}/sqlite3",
    f"{PY}/dbm",
    f"{PY}/curses",
    f"{PY}/config-3.11-x86_64-linux-gnu",
    f"{PY}/lib-dynload/_sqlite3*",
    f"{PY}/lib-dynload/_dbm*",
    f"{PY}/lib-dynload/_gdbm*",
    f"{PY}/lib-dynload/_curses*",
    f"{PY}/lib-dynload/readline*",
    f"{PY}/lib-dynload/nis*",
    f"{PY}/lib-dynload/_tkinter*",
    f"{PY}/lib-dynload/xxlimited*",
    f"{PY}/lib-dynload/_test*",
    f"{PY}/lib-dynload/_xxtest*",
    f"{LIBS}/libsqlite3*",
    f"{LIBS}/libdb-5.3*",
    f"{LIBS}/libgdbm*",
    f"{LIBS}/libncurses*",
    f"{LIBS}/libform*",
    f"{LIBS}/libmenu*",
    f"{LIBS}/libpanel*",
    f"{LIBS}/libreadline*",
    f"{LIBS}/libhistory*",
    f"{LIBS}/libnsl*",
    f"{LIBS}/libtirpc*",
    f"{LIBS}/libgssapi*",
    f"{LIBS}/libkrb5*",
    f"{LIBS}/libk5crypto*",
    f"{LIBS}/libkrb5support*",
    f"{LIBS}/libcom_err*",
    f"{LIBS}/libkeyutils*",
    f"{LIBS}/krb5",
    "usr/share/readline",
    "usr/share/terminfo",
    "lib/terminfo",
    "etc/terminfo",
)
SITE = "usr/lib/kube-scale-exporter"  # the dependencies' and the package's own directory
PYTHON = "/usr/bin/python3.11"


def run(*argv, **kw):
    return subprocess.run([str(a) for a in argv], check=True, **kw)


def drop(root: Path) -> None:
    for pattern in DROP_PATHS:
        for path in root.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    for cache in root.rglob("__pycache__"):
        shutil.rmtree(cache)


def interpreter(work: Path) -> Path:
    root = work / "interpreter"
    if not (root / PYTHON.lstrip("/")).exists():
        shutil.rmtree(root, ignore_errors=True)
        run(
            "mmdebstrap",
            "--quiet",
            "--variant=extract",
            "--include=" + ",".join(PACKAGES),
            SUITE,
            root,
            *MIRRORS,
        )
    drop(root)
    run("/usr/sbin/chroot", root, PYTHON, "-m", "compileall", "-q", "-j0", f"/{PY}")
    return root


def wheels(work: Path) -> Path:
    out = work / "wheels"
    shutil.rmtree(out, ignore_errors=True)
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, REPO)
    run(
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--only-binary=:all:",
        "--python-version=3.11",
        "--implementation=cp",
        "--platform=manylinux2014_x86_64",
        "--platform=manylinux_2_28_x86_64",
        "--dest",
        out,
        *[str(w) for w in out.glob("kube_scale_exporter-*.whl")],
    )
    return out


def install(root: Path, wheel_dir: Path, names: list[str]) -> None:
    run(
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        "--no-deps",
        "--no-compile",
        "--target",
        root / SITE,
        *[str(wheel_dir / n) for n in names],
    )
    for extra in ("bin",):
        shutil.rmtree(root / SITE / extra, ignore_errors=True)


def layered(work: Path) -> list[Path]:
    """Three trees, each holding only what its layer adds."""
    base = interpreter(work)
    found = wheels(work)
    ours = [w.name for w in found.glob("kube_scale_exporter-*.whl")]
    deps = [w.name for w in found.iterdir() if w.name not in ours]
    full = work / "full"
    shutil.rmtree(full, ignore_errors=True)
    run("cp", "-a", base, full)
    trees = [base]
    for name, wheel_names in (("deps", deps), ("package", ours)):
        before = {p for p in full.rglob("*")}
        install(full, found, wheel_names)
        run("/usr/sbin/chroot", full, PYTHON, "-m", "compileall", "-q", "-j0", f"/{SITE}")
        tree = work / name
        shutil.rmtree(tree, ignore_errors=True)
        for path in sorted(p for p in full.rglob("*") if p not in before):
            dest = tree / path.relative_to(full)
            if path.is_dir() and not path.is_symlink():
                dest.mkdir(parents=True, exist_ok=True)
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, dest, follow_symlinks=False)
        trees.append(tree)
    return [*trees, full]


# Node mode's defaults; cluster mode with its etcd collector on an endpoint nothing serves
# (it reports its failure, as it must, through requests and the rest of its stack).
MODES = {
    "node": ["--mode", "node"],
    "cluster": [
        "--mode",
        "cluster",
        "--collector.etcd",
        "--etcd.cluster",
        "main=http://127.0.0.1:9",
    ],
}


def smoke(full: Path) -> dict[str, str]:
    """The exporter in both modes in the built tree (a chroot, the host's network): it serves
    /metrics with its build info and every enabled collector's success, failed or not (no
    containerd, etcd or API server is given it here)."""
    env = {"PYTHONPATH": f"/{SITE}", "PATH": "/usr/bin"}
    out = {}
    for mode in ("node", "cluster"):
        port = free_port()
        log = full.parent / f"smoke-{mode}.log"
        # /proc and /sys as a container runtime gives them, in a mount namespace of its own
        # (gone when the process exits; the host's mounts are untouched).
        for mount in ("proc", "sys"):
            (full / mount).mkdir(exist_ok=True)
        argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c"]
        argv += [
            'mount -t proc proc "$0/proc" && mount --rbind /sys "$0/sys" && exec /usr/sbin/chroot "$@"'
        ]
        argv += [str(full), str(full), PYTHON, "-m", "kube_scale_exporter", *MODES[mode]]
        argv += [f"--web.listen-address=127.0.0.1:{port}"]
        with open(log, "wb") as f:
            proc = subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT)
        try:
            body, deadline = "", time.monotonic() + 60
            while time.monotonic() < deadline and "kubescale_build_info" not in body:
                time.sleep(0.5)
                try:
                    with urllib.request.urlopen(
                        f"http://127.0.0.1:{port}/metrics", timeout=20
                    ) as r:
                        body = r.read().decode()
                except OSError:
                    pass
            collectors = sorted(
                set(re.findall(r'kubescale_scrape_collector_success\{[^}]*collector="(\w+)"', body))
            )
            out[mode] = (
                f"served /metrics ({len(body.splitlines())} lines; collectors {', '.join(collectors)})"
                if "kubescale_build_info" in body
                else "FAILED: " + log.read_text(errors="replace")[-300:]
            )
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return out


def buildah(work: Path, *args, capture=False):
    store = work / "buildah"
    argv = [
        "buildah",
        "--root",
        store / "storage",
        "--runroot",
        store / "run",
        "--storage-driver",
        "vfs",
        *args,
    ]
    env = dict(os.environ, BUILDAH_ISOLATION="chroot", TMPDIR=str(work / "tmp"))
    (work / "tmp").mkdir(exist_ok=True)
    return subprocess.run(
        [str(a) for a in argv], env=env, check=True, capture_output=capture, text=True
    ).stdout


def commit(work: Path, name: str, trees: list[Path], config: list[str]) -> Path:
    """An image of `trees`, one layer each, as a docker-archive tarball."""
    parent = "scratch"
    for i, tree in enumerate(trees):
        ctr = buildah(work, "from", parent, capture=True).strip()
        buildah(work, "copy", ctr, f"{tree}/.", "/")
        if i == len(trees) - 1:
            buildah(work, "config", *config, ctr)
        tag = f"localhost/kse-perf24-{name}:layer{i}"
        buildah(work, "commit", "--quiet", ctr, tag)
        buildah(work, "rm", ctr)
        parent = tag
    archive = work / f"{name}.tar"
    archive.unlink(missing_ok=True)
    buildah(work, "push", parent, f"docker-archive:{archive}:localhost/{name}:bench")
    return archive


def layer_sizes(archive: Path) -> list[tuple[int, int]]:
    """(uncompressed, gzip'd) bytes of each layer of a docker-archive, in order."""
    with tarfile.open(archive) as tar:
        (manifest,) = json.load(tar.extractfile("manifest.json"))
        sizes = []
        for layer in manifest["Layers"]:
            data = tar.extractfile(layer).read()
            sizes.append((len(data), len(gzip.compress(data, compresslevel=6))))
    return sizes


def mb(n: int) -> str:
    return f"{n / 1e6:.1f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.image_size", description=__doc__.splitlines()[0]
    )
    p.add_argument("--work", type=Path, default=Path("/var/tmp/kse-image-size"))
    args = p.parse_args(argv)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    *trees, full = layered(work)
    ran = smoke(full)
    ours = commit(
        work,
        "kube-scale-exporter-minimal",
        trees,
        [
            "--env",
            f"PYTHONPATH=/{SITE}",
            "--env",
            "PYTHONDONTWRITEBYTECODE=1",
            "--env",
            "PYTHONUNBUFFERED=1",
            "--user",
            "65534:65534",
            "--port",
            "9867",
            "--entrypoint",
            json.dumps([PYTHON, "-m", "kube_scale_exporter"]),
        ],
    )
    rows = [
        (
            "kube-scale-exporter, minimal base (this bench)",
            ours,
            ["interpreter", "dependencies", "package"],
        )
    ]
    dockerfile = max(
        (image.CACHE / "images").glob("kube-scale-exporter-*.tar"),
        key=lambda f: f.stat().st_mtime,
        default=None,
    )
    if dockerfile:
        rows.append(
            (
                "kube-scale-exporter, ./Dockerfile (the e2e's latest build, read only)",
                dockerfile,
                None,
            )
        )
    peers = {
        "node_exporter": (
            image.CACHE / "node-exporter-sid/root/usr/bin/prometheus-node-exporter",
            ["--version"],
        ),
        "kube-state-metrics": (
            image.CACHE / "kube-state-metrics-v2.15.0/kube-state-metrics",
            ["version"],
        ),
    }
    for name, (binary, version_args) in peers.items():
        if binary.exists():
            tree = work / f"peer-{name}"
            shutil.rmtree(tree, ignore_errors=True)
            (tree / "bin").mkdir(parents=True)
            shutil.copy2(binary, tree / "bin" / name)
            archive = commit(
                work, f"peer-{name}", [tree], ["--entrypoint", json.dumps([f"/bin/{name}"])]
            )
            said = subprocess.run([str(binary), *version_args], capture_output=True, text=True)
            version = ((said.stdout or said.stderr).splitlines() or ["?"])[0]
            rows.append(
                (f"{name} binary alone on an empty base ({version.strip()})", archive, [name])
            )
    lines = [
        "# The exporter's image, layer by layer",
        "",
        f"`python -m bench.image_size` on {versions.host()}, {started}; {versions.ours()}.",
        "Sizes in MB (10^6 bytes): each layer as the uncompressed tar a docker-archive holds, and gzip'd",
        "(level 6) as a registry serves it.",
        "",
        "| image | layer | uncompressed MB | gzip MB |",
        "|---|---|---:|---:|",
    ]
    totals = {}
    for title, archive, names in rows:
        sizes = layer_sizes(archive)
        for i, (raw, gz) in enumerate(sizes):
            label = names[i] if names and i < len(names) else f"layer {i + 1}"
            lines.append(f"| {title} | {label} | {mb(raw)} | {mb(gz)} |")
        raw_total, gz_total = sum(s[0] for s in sizes), sum(s[1] for s in sizes)
        totals[title] = (raw_total, gz_total, archive.stat().st_size)
        lines.append(
            f"| **{title}** | **all ({len(sizes)} layers; archive {mb(archive.stat().st_size)})** | **{mb(raw_total)}** | **{mb(gz_total)}** |"
        )
    minimal = totals[rows[0][0]]
    lines += [
        "",
        f"Target: at most {TARGET_MB} MB uncompressed: {mb(minimal[0])} MB "
        + ("met" if minimal[0] <= TARGET_MB * 1e6 else "MISSED")
        + ".",
        f"A DaemonSet rollout to {FLEET_NODES:,} nodes pulls {FLEET_NODES * minimal[1] / 1e9:.0f} GB "
        f"(gzip'd layers) of the minimal image"
        + (
            f", against {FLEET_NODES * totals[rows[1][0]][1] / 1e9:.0f} GB of the Dockerfile's"
            if dockerfile
            else ""
        )
        + " (before any registry mirror or node-local cache).",
        "",
        "The exporter in the minimal tree (in a chroot with /proc and /sys, scraped once): "
        f"`{' '.join(MODES['node'])}` {ran['node']}; `{' '.join(MODES['cluster'])}` "
        f"{ran['cluster']}.",
        "",
        "Dropped from the Debian packages: " + ", ".join(f"`{d}`" for d in DROP_PATHS) + ".",
    ]
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
