"""A valid scraper's first scrape while others flood basic auth with password guesses,
beside node_exporter (testbed/node_exporter.py: the release .ci/bench.d builds) with the same
web config file.

    python -m bench.web_flood [--probes 5] [--before REF]

Each exporter serves TLS with basic auth (bcrypt cost 10) and every collector off. A
flood of 16 or 100 guessers (testbed/guessers.py: one keep-alive connection each, wrong
passwords for the user "prometheus", as fast as they are answered) comes from one
address (127.0.0.2), from a few (127.0.0.2-4), or from the scraper's own address
(127.0.0.1). Once every guesser has sent its first guess, `--probes` scrapers each
scrape /metrics once from 127.0.0.1 as a user not yet checked (so each pays its bcrypt
check), on a new connection, with a 10 s timeout (a typical scrape timeout). Reported:
the answers, the slowest answered and the median latency, and the guesses answered 401
(checked) and refused per second. `--before REF`: the exporter at git ref REF too.
Results go to bench/results/web_flood.md and stdout.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import os
import ssl
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import bcrypt

from bench.web_idle import checkout
from bench.web_security import make_pki
from testbed.exporter import exporter_argv
from testbed import node_exporter
from testbed.guessers import Guessers
from testbed.procs import Proc, start_on_free_port

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "web_flood.md"
SCRAPE_TIMEOUT = 10.0
COST = 10
SCRAPER = "127.0.0.1"
SOURCES = {
    "one address": ["127.0.0.2"],
    "3 addresses": ["127.0.0.2", "127.0.0.3", "127.0.0.4"],
    "the scraper's address": [SCRAPER],
}
FLOODS = [
    (16, "one address"),
    (100, "one address"),
    (16, "3 addresses"),
    (100, "3 addresses"),
    (16, "the scraper's address"),
    (100, "the scraper's address"),
]


def web_config(workdir: Path, cert: str, key: str, probes: int) -> tuple[str, list[str]]:
    """The file, and the passwords of the users scraper0..N-1 (user "prometheus" is guessed)."""
    passwords = [f"scraper-password-{i}" for i in range(probes)]
    users = {
        "prometheus": "not-what-they-guess",
        **{f"scraper{i}": p for i, p in enumerate(passwords)},
    }
    lines = [f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\nbasic_auth_users:"]
    for user, password in users.items():
        hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(COST)).decode()
        lines.append(f"  {user}: '{hashed}'")
    path = workdir / "web-flood.yml"
    path.write_text("\n".join(lines) + "\n")
    return str(path), passwords


def argv_for(exporter: str, port: int, web: str) -> list[str]:
    if exporter.startswith("node_exporter"):
        return [
            node_exporter.binary(),
            "--collector.disable-defaults",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--web.config.file={web}",
        ]
    return exporter_argv(port, ["--collector.disable-defaults", "--web.config.file", web])


def scrape_once(port: int, context: ssl.SSLContext, user: str, password: str) -> tuple[str, float]:
    """One scrape on a new connection from SCRAPER: (status or "timeout"/"error", seconds)."""
    conn = http.client.HTTPSConnection(
        "127.0.0.1", port, source_address=(SCRAPER, 0), context=context, timeout=SCRAPE_TIMEOUT
    )
    credentials = base64.b64encode(f"{user}:{password}".encode()).decode()
    started = time.perf_counter()
    try:
        conn.request("GET", "/metrics", headers={"Authorization": "Basic " + credentials})
        response = conn.getresponse()
        response.read()
        status = str(response.status)
    except TimeoutError:
        status = "timeout"
    except (OSError, http.client.HTTPException):
        status = "error"
    finally:
        conn.close()
    return status, time.perf_counter() - started


def measure(
    exporter: str, workdir: Path, web: str, ca: str, passwords: list[str], floods, env: dict
) -> list[dict]:
    context = ssl.create_default_context(cafile=ca)
    rows = []
    for guessers, where in floods:
        proc, port = start_on_free_port(
            lambda port: Proc(
                argv_for(exporter, port, web),
                workdir / f"{port}.log",
                env=env,
                cwd=env.get("CWD", ROOT),
            ),
            timeout=20,
        )
        try:
            flood = Guessers(port, guessers, SOURCES[where], ca=ca)
            started = time.monotonic()
            try:
                answers = [
                    scrape_once(port, context, f"scraper{i}", password)
                    for i, password in enumerate(passwords)
                ]
            finally:
                seconds = time.monotonic() - started
                guesses = flood.stop()
        finally:
            proc.stop()
        answered = [took for status, took in answers if status == "200"]
        rows.append(
            {
                "exporter": exporter,
                "flood": f"{guessers} from {where}",
                "answers": Counter(status for status, _ in answers),
                "median_s": statistics.median(took for _, took in answers),
                "slowest_ok_s": max(answered) if answered else None,
                "checked_per_s": guesses.get("401", 0) / seconds,
                "refused_per_s": sum(v for k, v in guesses.items() if k not in ("401",)) / seconds,
            }
        )
        print(rows[-1], flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=5)
    parser.add_argument("--before", help="also run the exporter at this git ref")
    args = parser.parse_args()
    peer = f"node_exporter {node_exporter.version(node_exporter.binary()).split()[2]}"
    exporters = ["kube-scale-exporter", peer]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        ca, cert, key = make_pki(workdir)
        web, passwords = web_config(workdir, cert, key, args.probes)
        envs = {name: dict(os.environ) for name in exporters}
        if args.before:
            before = checkout(args.before, workdir / "before")
            name = f"kube-scale-exporter at {args.before}"
            exporters.insert(1, name)
            envs[name] = {**os.environ, "PYTHONPATH": str(before), "CWD": str(before)}
        for exporter in exporters:
            rows += measure(exporter, workdir, web, ca, passwords, FLOODS, envs[exporter])
    lines = [
        f"# A valid scraper's first scrape under a password-guessing flood ({args.probes} "
        "probes each)",
        "",
        "`python -m bench.web_flood"
        + (f" --before {args.before}" if args.before else "")
        + "`. TLS + basic auth, bcrypt cost 10, collectors off; guessers on keep-alive "
        'connections, guessing the user "prometheus"; each probe a new connection from '
        "127.0.0.1 as another user, not yet "
        f"checked, timeout {SCRAPE_TIMEOUT:.0f} s; machine: 2 cores, shared, clients on "
        "the same host.",
        "",
        "| exporter | flood | probe answers | median s | slowest 200 s | guesses checked/s | "
        "guesses refused/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        answers = ", ".join(f"{n}x {status}" for status, n in sorted(r["answers"].items()))
        slowest = f"{r['slowest_ok_s']:.2f}" if r["slowest_ok_s"] is not None else "-"
        lines.append(
            f"| {r['exporter']} | {r['flood']} | {answers} | {r['median_s']:.2f} | {slowest} | "
            f"{r['checked_per_s']:.0f} | {r['refused_per_s']:.0f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
