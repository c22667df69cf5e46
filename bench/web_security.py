"""What --web.config.file costs a scrape, beside Debian's node_exporter with the same file.

    python -m bench.web_security [--scrapes 500] [--connections 100]

Both exporters run with every collector off, so the figures are the HTTP layer's own.
For each of plain HTTP, TLS, and TLS with basic auth (bcrypt cost 10), it times
`--scrapes` keep-alive scrapes (as Prometheus scrapes: one connection, reused) and
`--connections` scrapes on a new connection each (a TLS handshake each), and reads the
exporter's CPU time from /proc. Results go to bench/results/web_security.md and stdout.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import bcrypt
import requests

from testbed import node_exporter
from testbed.exporter import exporter_argv
from testbed.ports import free_port
from testbed.procs import Proc, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "web_security.md"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PASSWORD = "bench-password"


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def make_pki(root: Path) -> tuple[str, str, str]:
    def ssl(*args):
        subprocess.run(["openssl", *args], cwd=root, check=True, capture_output=True)

    ssl(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=bench CA",
    )
    (root / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    ssl(
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    )
    ssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "1",
        "-extfile",
        "san.ext",
    )
    return str(root / "ca.crt"), str(root / "server.crt"), str(root / "server.key")


def configs(root: Path, cert: str, key: str) -> dict[str, str | None]:
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
    tls = f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
    files = {
        "http": None,
        "tls": tls,
        "tls+basic auth": tls + f"basic_auth_users:\n  bench: '{hashed}'\n",
    }
    out = {}
    for name, text in files.items():
        if text is None:
            out[name] = None
            continue
        path = root / f"web-{name.replace('+', '-').replace(' ', '-')}.yml"
        path.write_text(text)
        out[name] = str(path)
    return out


def argv_for(which: str, port: int, web: str | None) -> list[str]:
    if which == "kube-scale-exporter":
        argv = exporter_argv(port, ["--collector.disable-defaults"])
    else:
        argv = [
            node_exporter.binary(),
            "--collector.disable-defaults",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
    if web:
        argv.append(f"--web.config.file={web}")
    return argv


def measure(
    which: str,
    variant: str,
    web: str | None,
    ca: str,
    scrapes: int,
    connections: int,
    workdir: Path,
) -> dict:
    port = free_port()
    proc = Proc(argv_for(which, port, web), workdir / f"{which}-{port}.log", cwd=ROOT)
    try:
        wait_for_port(port, proc=proc)
        scheme = "https" if web else "http"
        url = f"{scheme}://127.0.0.1:{port}/metrics"
        auth = ("bench", PASSWORD) if "basic" in variant else None
        session = requests.Session()
        session.trust_env = False
        first_started = time.perf_counter()
        assert session.get(url, auth=auth, verify=ca, timeout=10).ok
        first_ms = (time.perf_counter() - first_started) * 1000
        cpu0 = cpu_seconds(proc.pid)
        latencies = []
        for _ in range(scrapes):
            started = time.perf_counter()
            r = session.get(url, auth=auth, verify=ca, timeout=10)
            latencies.append(time.perf_counter() - started)
            assert r.ok, r.status_code
        cpu_keepalive = (cpu_seconds(proc.pid) - cpu0) / scrapes
        cpu0 = cpu_seconds(proc.pid)
        fresh = []
        for _ in range(connections):
            with requests.Session() as s:
                s.trust_env = False
                started = time.perf_counter()
                assert s.get(url, auth=auth, verify=ca, timeout=10).ok
                fresh.append(time.perf_counter() - started)
        cpu_fresh = (cpu_seconds(proc.pid) - cpu0) / connections
        return {
            "first_ms": first_ms,
            "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": statistics.quantiles(latencies, n=100)[98] * 1000,
            "cpu_ms": cpu_keepalive * 1000,
            "fresh_p50_ms": statistics.median(fresh) * 1000,
            "fresh_cpu_ms": cpu_fresh * 1000,
        }
    finally:
        proc.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=500)
    parser.add_argument("--connections", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        ca, cert, key = make_pki(workdir)
        rows = []
        peer = f"node_exporter {node_exporter.version(node_exporter.binary()).split()[2]}"
        for variant, web in configs(workdir, cert, key).items():
            for which in ("kube-scale-exporter", peer):
                rows.append(
                    (
                        which,
                        variant,
                        measure(which, variant, web, ca, args.scrapes, args.connections, workdir),
                    )
                )
    lines = [
        f"# --web.config.file: {args.scrapes} keep-alive scrapes, {args.connections} on new "
        "connections",
        "",
        "Both exporters with `--collector.disable-defaults`; client: python-requests on the "
        "same host; basic auth with a bcrypt cost-10 hash; machine: 2 cores, shared. "
        "node_exporter still exports its ~47 go_/process_/promhttp_ samples, ours 1 "
        "(kubescale_build_info), so the bodies differ; the TLS and auth columns' growth over "
        "http is the comparable part.",
        "",
        "| exporter | config | first scrape ms | p50 ms | p99 ms | CPU ms/scrape | "
        "new-connection p50 ms | new-connection CPU ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for which, variant, m in rows:
        lines.append(
            f"| {which} | {variant} | {m['first_ms']:.1f} | {m['p50_ms']:.2f} | "
            f"{m['p99_ms']:.2f} | {m['cpu_ms']:.2f} | {m['fresh_p50_ms']:.2f} | "
            f"{m['fresh_cpu_ms']:.2f} |"
        )
    ours = {v: m for w, v, m in rows if w == "kube-scale-exporter"}
    peer = {v: m for w, v, m in rows if w != "kube-scale-exporter"}
    lines += [
        "",
        "Ratios, kube-scale-exporter / node_exporter (keep-alive p50): "
        + ", ".join(f"{v} {ours[v]['p50_ms'] / peer[v]['p50_ms']:.2f}x" for v in ours),
    ]
    lines += [
        "Cost of TLS + basic auth over plain HTTP, kube-scale-exporter keep-alive p50: "
        f"{ours['tls+basic auth']['p50_ms'] / ours['http']['p50_ms']:.2f}x; first scrape "
        f"(pays bcrypt once) {ours['tls+basic auth']['first_ms']:.0f} ms"
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
