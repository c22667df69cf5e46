"""imagepull's two sources on the same live downloads: the socket against the ingest directory.

    python -m bench.imagepull_sources [--ingests 50] [--scrapes 200] [--versions 1.7,2.3,2.4]

For each containerd line (trixie's 1.7, 2.3 LTS and 2.4 built from the Go module proxy:
testbed's VERSIONS), starts it
with a docker-registry behind a slow throttling proxy and pulls of images of five fresh
random layers, three layers at a time as the CRI pulls, so about `--ingests` layers
download at once and stay active. Then, in
a separate Python process per source (so neither pays for the other's imports), builds
the collector as `kube-scale-exporter --mode node --image-pull.source=S` would and times
`--scrapes` collects, with its RSS; both read a kubelet config of parallel pulls with as
many slots as images pulled. No pods (the API server is not part of what differs:
both read the same pod watch). The figures both report on the same downloads, read back
to back, are in the table too. Results go to bench/results/imagepull_sources.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.imagepull import CHILD_PRELUDE, LAYER_SIZE, LAYERS_PER_IMAGE, pct
from testbed.builds import version_line
from testbed.containerd_server import VERSIONS, ContainerdServer, bin_dir
from testbed.procs import Proc
from testbed.registry_server import RegistryServer
from testbed.throttle_proxy import ThrottleProxy

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "imagepull_sources.md"
RATE = 16 << 10  # bytes/s per connection: a 4 MiB layer takes minutes, it stays active
FIGURES = (
    "kubescale_image_pulls_in_progress",
    "kubescale_image_pull_stalled",
    "kubescale_image_pull_downloaded_bytes",
    "kubescale_image_pull_expected_bytes",
)

# The measured side: its own interpreter, one JSON line.
CHILD = (
    CHILD_PRELUDE
    + r"""
(collector,) = [cls(args) for cls in classes]
collector.start()
times = []
for i in range(scrapes + 1):
    t = time.perf_counter()
    families = collector.families(collector.observe())
    times.append((time.perf_counter() - t) * 1e3)
out = {"first_ms": times[0], "times_ms": times[1:], "rss_end": rss(),
       "h2": "h2" in sys.modules,
       "series": {s.name: s.value for f in families for s in f.samples}}
collector.close()
print(json.dumps(out))
"""
)


def pull_as_the_cri_does(containerd, registry, proxy, ingests, logdir):
    """Images of five layers pulled with containerd's default of 3 layers at once, as the
    CRI pulls: `ctr content fetch --max-concurrent-downloads 3` on 1.x (its own default
    is no limit), `ctr images pull` through the transfer service (3 by default) on 2.x."""
    pulls = []
    two = containerd.release[0] == 2
    for i in range(max(1, ingests // 3)):
        repo = f"bench{i}-{os.urandom(3).hex()}"
        registry.push_image(repo, "v1", [LAYER_SIZE] * LAYERS_PER_IMAGE)
        ref = f"{proxy.host}/{repo}:v1"
        how = ("images", "pull") if two else ("content", "fetch", "--max-concurrent-downloads", "3")
        argv = containerd.ctr_argv(*how, "--plain-http", ref)
        pulls.append(Proc(argv, f"{logdir}/pull{i}.log"))
    return pulls


def ingest_dir(containerd):
    return os.path.join(containerd.workdir, "root", "io.containerd.content.v1.content", "ingest")


# The kubelet the bench plays: parallel pulls, as many slots as images it pulls at once.
KUBELET = (
    "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
    "serializeImagePulls: false\nmaxParallelImagePulls: {slots}\n"
)


def flags(containerd, source):
    out = [
        "--mode=node",
        "--kubelet.config-file",
        os.path.join(containerd.workdir, "kubelet.yaml"),
        "--collector.disable-defaults",
        "--collector.imagepull",
        f"--image-pull.source={source}",
        "--containerd.address",
        containerd.address,
        "--containerd.config",
        containerd.config,
    ]
    if source == "ingest":
        out += ["--containerd.ingest-dir", ingest_dir(containerd)]
    return out


def measure(containerd, source, scrapes):
    env = dict(os.environ, NODE_NAME="", PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(flags(containerd, source)), str(scrapes)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def one_version(label, opts, workdir, registry, proxy):
    containerd = ContainerdServer(f"{workdir}/cd-{label}", bin_dir=bin_dir(label)).start()
    fetches = pull_as_the_cri_does(containerd, registry, proxy, opts.ingests, workdir)
    with open(os.path.join(containerd.workdir, "kubelet.yaml"), "w") as f:
        f.write(KUBELET.format(slots=len(fetches)))
    try:
        active = containerd.layers_downloading(want=3 * (opts.ingests // 3))
        # Alternate the two so that load on the shared machine falls on both alike.
        runs = {"socket": [], "ingest": []}
        for _ in range(2):
            for source in runs:
                runs[source].append(measure(containerd, source, opts.scrapes // 2))
        same = {s: measure(containerd, s, 1)["series"] for s in ("socket", "ingest")}
        active_end = containerd.layers_downloading()
    finally:
        for f in fetches:
            f.stop()
        containerd.wipe()
    said = version_line(containerd.containerd)
    out = {"active": (active, active_end), "figures": same, "version": said}
    for source, results in runs.items():
        times = [t for r in results for t in r["times_ms"]]
        out[source] = {
            "p50": pct(times, 0.5),
            "p99": pct(times, 0.99),
            "first": max(r["first_ms"] for r in results),
            "rss": max(r["rss_end"] for r in results),
            "h2": any(r["h2"] for r in results),
            "n": len(times),
        }
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ingests", type=int, default=50)
    ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--versions", default=",".join(VERSIONS))
    opts = ap.parse_args()
    load = os.getloadavg()
    workdir = tempfile.mkdtemp(prefix="bs-", dir="/tmp")
    registry = RegistryServer(f"{workdir}/registry").start()
    proxy = ThrottleProxy(workdir, registry.port, RATE)
    results = {}
    try:
        for label in opts.versions.split(","):
            results[label] = one_version(label, opts, workdir, registry, proxy)
    finally:
        proxy.stop()
        registry.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    lines = [
        "| containerd | layers active (start / end) | source | collect p50 / p99 | first "
        "collect | RSS at the end | h2 loaded | socket p50 / ingest p50 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    figures = [
        "| containerd | source | "
        + " | ".join(f.removeprefix("kubescale_") for f in FIGURES)
        + " |",
        "| --- | --- |" + " --- |" * len(FIGURES),
    ]
    for label, r in results.items():
        ratio = r["socket"]["p50"] / r["ingest"]["p50"]
        for source in ("socket", "ingest"):
            m = r[source]
            lines.append(
                f"| {label} | {r['active'][0]} / {r['active'][1]} | {source} | "
                f"{m['p50']:.2f} / {m['p99']:.2f} ms | {m['first']:.1f} ms | {m['rss']:.1f} MiB | "
                f"{'yes' if m['h2'] else 'no'} | {ratio:.1f}x |"
            )
            series = r["figures"][source]
            figures.append(
                f"| {label} | {source} | " + " | ".join(f"{series[f]:.0f}" for f in FIGURES) + " |"
            )
    text = (
        "\n".join(lines)
        + "\n\nFigures on the same downloads, read back to back:\n\n"
        + "\n".join(figures)
    )
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        "# imagepull: socket source against ingest source\n\n"
        f"`python -m bench.imagepull_sources --ingests {opts.ingests} --scrapes {opts.scrapes} "
        f"--versions {opts.versions}` on {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores "
        f"(load average {load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end: "
        f"other jobs share the machine), Python {sys.version.split()[0]}. {opts.ingests} layers "
        f"of {opts.ingests // 3} images (3 of 5 layers at once, as the CRI pulls) download at {RATE >> 10} KiB/s each; each source "
        "in its own process, alternated twice; the kubelet config both read allows as many "
        "parallel pulls as there are images. containerd: "
        + "; ".join(f"{label}: `{r['version']}`" for label, r in results.items())
        + ".\n\n"
        + text
        + "\n"
    )
    print(f"\nwritten to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
