"""The exporter's image size, layer by layer: the image testbed/image.py builds from ./Dockerfile
(tools/image_tree.py's three trees on an empty base; what deploy/ and the e2e run), beside
peers' binaries on an empty base and, with --compare, any other docker-archive (an earlier
build of the Dockerfile, say, from the e2e's cache).

Sizes are the uncompressed tar of each layer (what `buildah push docker-archive:` writes,
which `ctr images import` takes) and, gzip'd, what a registry serves. Peers: node_exporter and
kube-state-metrics binaries as built or unpacked here, each alone on an empty base: a floor
for their published images (which add busybox or distroless files). Results:
bench/results/image_size.md.

Run as root: python -m bench.image_size [--work DIR] [--compare TITLE=ARCHIVE]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench import versions
from testbed import builds, container, image
from tools import image_tree

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench/results/image_size.md"
TARGET_MB = 60
FLEET_NODES = 7_500


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


def commit(work: Path, name: str, tree: Path, config: list[str]) -> Path:
    """An image of `tree`, one layer, as a docker-archive tarball (in --work's own storage)."""
    ctr = buildah(work, "from", "scratch", capture=True).strip()
    buildah(work, "copy", ctr, f"{tree}/.", "/")
    buildah(work, "config", *config, ctr)
    tag = f"localhost/kse-bench-{name}:bench"
    buildah(work, "commit", "--quiet", ctr, tag)
    buildah(work, "rm", ctr)
    archive = work / f"{name}.tar"
    archive.unlink(missing_ok=True)
    buildah(work, "push", tag, f"docker-archive:{archive}:{tag}")
    return archive


def layer_sizes(archive: Path) -> list[tuple[int, int]]:
    """(uncompressed, gzip'd) bytes of each layer of a docker-archive, in order."""
    _, layers = container.manifest(archive)
    return [(len(data), len(gzip.compress(data, compresslevel=6))) for data in layers]


def mb(n: int) -> str:
    return f"{n / 1e6:.1f}"


def peers(work: Path) -> list[tuple[str, Path, list[str]]]:
    """(title, archive, layer names) of each peer binary found here, alone on an empty base."""
    found = {
        "node_exporter": (
            builds.CACHE / f"node-exporter-{builds.node_exporter_version()}/node_exporter",
            ["--version"],
        ),
        "kube-state-metrics": (
            builds.CACHE
            / f"kube-state-metrics-{builds.kube_state_metrics_version()}/kube-state-metrics",
            ["version"],
        ),
    }
    rows = []
    for name, (binary, version_args) in found.items():
        if not binary.exists():
            continue
        tree = work / f"peer-{name}"
        shutil.rmtree(tree, ignore_errors=True)
        (tree / "bin").mkdir(parents=True)
        shutil.copy2(binary, tree / "bin" / name)
        archive = commit(work, f"peer-{name}", tree, ["--entrypoint", json.dumps([f"/bin/{name}"])])
        said = subprocess.run([str(binary), *version_args], capture_output=True, text=True)
        version = ((said.stdout or said.stderr).splitlines() or ["?"])[0]
        rows.append((f"{name} binary alone on an empty base ({version.strip()})", archive, [name]))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.image_size", description=__doc__.splitlines()[0]
    )
    p.add_argument("--work", type=Path, default=Path("/var/tmp/kse-image-size"))
    p.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="TITLE=ARCHIVE",
        help="another docker-archive to measure beside ours",
    )
    args = p.parse_args(argv)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    ours = image.build()  # this host's architecture
    machine = image_tree.MACHINES[image.HOST_ARCH]
    title = "kube-scale-exporter, ./Dockerfile (what deploy/ and the e2e run)"
    rows = [(title, ours, list(image_tree.LAYERS))]
    for spec in args.compare:
        other, _, path = spec.partition("=")
        rows.append((other, Path(path), None))
    rows += peers(work)
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
    for row_title, archive, names in rows:
        sizes = layer_sizes(archive)
        for i, (raw, gz) in enumerate(sizes):
            label = names[i] if names and i < len(names) else f"layer {i + 1}"
            lines.append(f"| {row_title} | {label} | {mb(raw)} | {mb(gz)} |")
        raw_total, gz_total = sum(s[0] for s in sizes), sum(s[1] for s in sizes)
        totals[row_title] = (raw_total, gz_total)
        lines.append(
            f"| **{row_title}** | **all ({len(sizes)} layers; archive {mb(archive.stat().st_size)})** | **{mb(raw_total)}** | **{mb(gz_total)}** |"
        )
    raw, gz = totals[title]
    against = "".join(
        f", against {FLEET_NODES * totals[other][1] / 1e9:.0f} GB of {other}"
        for other, _, names in rows[1:]
        if names is None
    )
    lines += [
        "",
        f"Target: at most {TARGET_MB} MB uncompressed: {mb(raw)} MB "
        + ("met" if raw <= TARGET_MB * 1e6 else "MISSED")
        + ".",
        f"A DaemonSet rollout to {FLEET_NODES:,} nodes pulls {FLEET_NODES * gz / 1e9:.0f} GB "
        f"(gzip'd layers) of ours{against} (before any registry mirror or node-local cache).",
        "",
        "Dropped from the Debian packages (tools/image_tree.py): "
        + ", ".join(f"`{d.format(machine=machine)}`" for d in image_tree.DROP_PATHS)
        + ".",
    ]
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
