"""Idle connections: what each costs the server, and how fast it answers meanwhile.

    python -m bench.web_idle [--connections 5000] [--before REF]

For each server, plain HTTP and TLS: open `--connections` TCP connections at once
(non-blocking connects, then the TLS handshakes) and leave them idle; report the time
until all were connected, RSS before and with them (and the difference per connection),
threads, CPU burnt while they sit idle for 3 s, and the latency of /metrics and /healthz
on new connections meanwhile; then, with those closed, the latency of /healthz while
another process keeps opening `--connections` at once and closing them. Servers: this tree's exporter with its default
--web.max-connections (512) and with it raised above `--connections` (to see the cost of
each connection held); the exporter at git ref
`--before` (thread per connection); a stdlib asyncio prototype (bench/web_idle_asyncio.py);
node_exporter (/ for its /healthz, which it lacks). All with collectors off. Results: bench/results/web_idle.md.
"""

from __future__ import annotations

import argparse
import os
import ssl
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

import requests

from testbed import node_exporter
from testbed.exporter import exporter_argv
from testbed.idle import close_all, open_idle, raise_own_nofile, server_sockets, threads
from testbed.pki import TestCA
from testbed.ports import free_port
from testbed.procs import Proc, cpu_seconds, rss_mib, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "web_idle.md"
CHURN_SECONDS = 5.0
CHURN_SOURCE = "127.0.0.2"  # the attacker's address; the timed requests come from 127.0.0.1


def checkout(ref: str, into: Path) -> Path:
    """The package as it was at `ref`, unpacked beside (not in) any worktree."""
    data = subprocess.run(
        ["git", "archive", ref, "kube_scale_exporter"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def argv_for(
    server: str, port: int, web: str | None, cert: str, key: str, connections: int
) -> list[str]:
    if server == "node_exporter":
        argv = [
            node_exporter.binary(),
            "--collector.disable-defaults",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        return argv + ([f"--web.config.file={web}"] if web else [])
    if server == "asyncio prototype":
        return [sys.executable, "-m", "bench.web_idle_asyncio", str(port)] + (
            [cert, key] if web else []
        )
    flags = ["--collector.disable-defaults"]
    if server == "this tree, cap raised":
        flags += ["--web.max-connections", str(connections + 100)]
    return exporter_argv(port, flags + (["--web.config.file", web] if web else []))


def latencies(url: str, ca: str | None, n: int = 40) -> list[float]:
    out = []
    for _ in range(n):
        with requests.Session() as s:
            s.trust_env = False
            started = time.perf_counter()
            try:
                ok = s.get(url, verify=ca or True, timeout=10).status_code == 200
            except requests.RequestException:
                ok = False
            out.append((time.perf_counter() - started) * 1000 if ok else float("inf"))
    return out


def health_path(server: str) -> str:
    """The cheap endpoint each server answers: node_exporter has no /healthz (404), its
    landing page is the equivalent."""
    return "/" if server == "node_exporter" else "/healthz"


def measure(server: str, web: str | None, pki: dict, n: int, workdir: Path, env: dict) -> dict:
    port = free_port()
    proc = Proc(
        argv_for(server, port, web, pki["cert"], pki["key"], n),
        workdir / f"{port}.log",
        env=env,
        cwd=env.get("CWD", ROOT),
    )
    socks: list = []
    try:
        wait_for_port(port, proc=proc, timeout=20)
        scheme = "https" if web else "http"
        base = f"{scheme}://127.0.0.1:{port}"
        latencies(base + "/metrics", pki["ca"], 5)  # warm up
        rss0 = rss_mib(proc.pid)[0]
        context = None
        if web:
            context = ssl.create_default_context(cafile=pki["ca"])
        socks, took = open_idle(port, n, context)
        time.sleep(1.0)
        cpu0 = cpu_seconds(proc.pid)
        time.sleep(3.0)
        cpu_idle = (cpu_seconds(proc.pid) - cpu0) / 3.0
        rss1 = rss_mib(proc.pid)[0]
        held = server_sockets(proc.pid)
        held_threads = threads(proc.pid)
        metrics = latencies(base + "/metrics", pki["ca"])
        health = latencies(base + health_path(server), pki["ca"])
        close_all(socks)
        socks = []
        # Then churn: another process opens n connections at once, closes them, again.
        flood = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "testbed.idle",
                str(port),
                str(n),
                str(CHURN_SECONDS),
                "--source",
                CHURN_SOURCE,
            ]
            + (["--ca", pki["ca"]] if web else []),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.5)
        during = latencies(base + health_path(server), pki["ca"], 20)
        churned = int(flood.communicate(timeout=CHURN_SECONDS + 150)[0] or 0)
        return {
            "held": held,
            "connect_s": took,
            "rss0": rss0,
            "rss1": rss1,
            "kib_per_conn": (rss1 - rss0) * 1024 / max(1, held),
            "threads": held_threads,
            "cpu": cpu_idle * 100,
            "churned": churned,
            "during_p50": statistics.median(during),
            "during_max": max(during),
            "metrics_p50": statistics.median(metrics),
            "metrics_max": max(metrics),
            "health_p50": statistics.median(health),
            "health_max": max(health),
            "alive": proc.alive(),
        }
    finally:
        close_all(socks)
        proc.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=5000)
    parser.add_argument(
        "--before",
        default="0a9b3d5",
        help="git ref of the thread-per-connection exporter (default 0a9b3d5)",
    )
    parser.add_argument(
        "--servers",
        default="this tree,this tree, cap raised,before,asyncio prototype,node_exporter",
    )
    args = parser.parse_args()
    raise_own_nofile()  # our n client sockets
    version = node_exporter.version(node_exporter.binary())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        ca = TestCA(workdir, "ca")
        cert, key = ca.issue("server", "subjectAltName=IP:127.0.0.1")
        pki = {"ca": ca.crt, "cert": cert, "key": key}
        web = workdir / "web.yml"
        web.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
        before = checkout(args.before, workdir / "before")
        for server in args.servers.replace(", cap", "; cap").split(","):
            server = server.replace("; cap", ", cap")
            env = dict(os.environ)
            if server == "before":
                env["PYTHONPATH"] = str(before)
                env["CWD"] = str(before)
            else:
                env["PYTHONPATH"] = str(ROOT)
            for variant, config in (("http", None), ("tls", str(web))):
                m = measure(server, config, pki, args.connections, workdir, env)
                rows.append((server, variant, m))
                print(server, variant, m, flush=True)
    lines = [
        f"# {args.connections} idle connections",
        "",
        (
            f"Each server with its collectors off; {args.connections} connections opened at once "
            "from one client process (TLS: handshakes concurrent, then silent), held 4 s, then 40 "
            "requests each to /metrics and /healthz on new connections. Machine: 2 cores, "
            f"shared. `before` is the exporter at {args.before} (thread per connection); "
            f"node_exporter is {version}; it has no /healthz, so its rows time `/`, its "
            "landing page."
        ),
        "",
        (
            f"Churn: then, for {CHURN_SECONDS:.0f} s, another process opens "
            f"{args.connections} connections at once from {CHURN_SOURCE} (TLS: and "
            "handshakes), closes them and starts again; 20 /healthz requests on new "
            "connections from 127.0.0.1 are timed meanwhile (`inf`: a request failed)."
        ),
        "",
        (
            "`sockets held` is what the server holds at the end (its listener and 2 internal "
            "sockets included), read from /proc; KiB per conn divides the RSS growth by it. When "
            "the accept queue overflows, a client's connect succeeds although the server never "
            "gets the connection: the `before` rows (backlog 5) hold a fraction of the "
            f"{args.connections}."
        ),
        "",
        (
            "| server | conn | sockets held | all connected s | RSS before MiB | RSS with them MiB | "
            "KiB per conn | threads | CPU % idle | /metrics p50 ms | max ms | /healthz p50 ms | "
            "max ms | churn: connections made | churn: /healthz p50 ms | max ms |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for server, variant, m in rows:
        lines.append(
            f"| {server} | {variant} | {m['held']} | {m['connect_s']:.1f} | {m['rss0']:.1f} | "
            f"{m['rss1']:.1f} | {m['kib_per_conn']:.1f} | {m['threads']} | {m['cpu']:.0f} | "
            f"{m['metrics_p50']:.1f} | {m['metrics_max']:.1f} | {m['health_p50']:.1f} | "
            f"{m['health_max']:.1f} | {m['churned']} | {m['during_p50']:.1f} | "
            f"{m['during_max']:.1f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
