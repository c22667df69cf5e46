"""--web.kube-rbac (in process) beside the kube-rbac-proxy sidecar it replaces.

    python -m bench.kube_rbac [--scrapes 300] [--seconds 330] [--interval 5] [--flood 10]

A real etcd + kube-apiserver (testbed) with an audit log of every TokenReview and
SubjectAccessReview, and service accounts: Prometheus' (allowed to get /metrics), and one
reviewer per side (create tokenreviews and subjectaccessreviews, what
deploy/components/kube-rbac grants), so the audit log tells whose reviews are whose. The
exporter runs with its neighbor collector only, three ways:

- in process: TLS (--web.config.file) and --web.kube-rbac;
- sidecar: the exporter on plain HTTP on loopback, kube-rbac-proxy (built by
  .ci/bench.d/42-kube-rbac-proxy.sh) in front of it with TLS, as kube-prometheus runs it;
- no authorization: the sidecar's upstream scraped directly (the floor).

Then:
1. per scrape: `--scrapes` scrapes on one kept-alive connection with Prometheus' token,
   one target at a time: latency, CPU of the processes per scrape, reviews;
2. over time: every target scraped every `--interval` s for `--seconds` s at once (with
   a third, in process with --web.kube-rbac.cache-ttl 5m): the reviews each side asks
   the API server for as its caches expire (kube-rbac-proxy: tokens 2 min, grants 5 min);
3. flood: for `--flood` s, 8 clients each sending a new invalid token on every request,
   beside Prometheus scraping every 0.5 s; one side at a time.
RSS of every process at the end of 1 and of 3. Writes bench/results/kube_rbac.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import secrets
import statistics
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import requests

from bench import peers
from kube_scale_exporter.web import kuberbac
from testbed.accounts import service_account
from testbed.builds import kube_rbac_proxy_binary, version_line
from testbed.exporter import exporter_argv
from testbed.kube_apiserver import apiserver_on_new_etcd
from testbed.pki import TestCA
from testbed.ports import free_port
from testbed.procs import Proc, cpu_seconds, rss_mib, wait_for_port

RESULTS = peers.ROOT / "bench" / "results" / "kube_rbac.md"
METRICS_READER = [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "Metadata",
            "resources": [
                {"group": "authentication.k8s.io", "resources": ["tokenreviews"]},
                {"group": "authorization.k8s.io", "resources": ["subjectaccessreviews"]},
            ],
        },
        {"level": "None"},
    ],
}
FLOOD_CLIENTS = 8
NODES = 7_500


class Side:
    """One way of serving /metrics: its URL, its processes, and whose reviews are its."""

    def __init__(self, name: str, url: str, procs: dict[str, Proc], reviewer: str | None):
        self.name, self.url, self.procs, self.reviewer = name, url, procs, reviewer

    def cpu(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self.procs.values())

    def rss(self) -> dict[str, float]:
        return {role: rss_mib(p.pid)[0] for role, p in self.procs.items()}


class Audit:
    """Reviews in the API server's audit log, by reviewer."""

    def __init__(self, path: Path):
        self.path = path

    def counts(self) -> Counter:
        counts: Counter = Counter()
        if not self.path.exists():
            return counts
        for line in self.path.read_text().splitlines():
            event = json.loads(line)
            if event.get("stage") != "ResponseComplete":
                continue
            user = event["user"]["username"].rsplit(":", 1)[-1]
            counts[(user, event["objectRef"]["resource"])] += 1
        return counts

    def of(self, side: Side, before: Counter, after: Counter) -> tuple[int, int]:
        """(TokenReviews, SubjectAccessReviews) `side` asked for between two counts."""
        return tuple(
            after[(side.reviewer, r)] - before[(side.reviewer, r)]
            for r in ("tokenreviews", "subjectaccessreviews")
        )


def session(ca: str) -> requests.Session:
    s = requests.Session()
    s.trust_env = False
    s.verify = ca
    return s


def per_scrape(side: Side, token: str, ca: str, n: int, audit: Audit) -> dict:
    s = session(ca)
    headers = {"Authorization": f"Bearer {token}"}
    for _ in range(5):  # the connection and the first review
        s.get(side.url, headers=headers, timeout=10).raise_for_status()
    before, cpu0 = audit.counts(), side.cpu()
    ms = []
    for _ in range(n):
        started = time.perf_counter()
        r = s.get(side.url, headers=headers, timeout=10)
        ms.append((time.perf_counter() - started) * 1e3)
        r.raise_for_status()
    cpu = (side.cpu() - cpu0) / n * 1e3
    time.sleep(1)  # the audit log is written as requests complete
    reviews = audit.of(side, before, audit.counts()) if side.reviewer else (0, 0)
    ms.sort()
    return {
        "p50": statistics.median(ms),
        "p99": ms[int(len(ms) * 0.99) - 1],
        "cpu_ms": cpu,
        "reviews": reviews,
        "rss": side.rss(),
    }


def over_time(sides: list[Side], token: str, ca: str, seconds: float, interval: float) -> dict:
    """Every side scraped every `interval` s for `seconds` s, at once; failures per side."""
    failures: Counter = Counter()

    def scrape(side: Side):
        s = session(ca)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.monotonic()
            try:
                s.get(side.url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
            except requests.RequestException:
                failures[side.name] += 1
            time.sleep(max(0.0, interval - (time.monotonic() - started)))

    threads = [threading.Thread(target=scrape, args=(side,)) for side in sides]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failures


def flood(side: Side, token: str, ca: str, seconds: float) -> dict:
    """Clients with a new invalid token on every request, beside Prometheus."""
    statuses: Counter = Counter()
    legit: list[float] = []
    legit_failed = [0]
    stop = threading.Event()

    def attacker():
        s = session(ca)
        while not stop.is_set():
            bad = "eyJhbGciOiJSUzI1NiJ9." + secrets.token_urlsafe(600)
            try:
                code = s.get(side.url, headers={"Authorization": f"Bearer {bad}"}, timeout=10)
                statuses[code.status_code] += 1
            except requests.RequestException:
                statuses["error"] += 1

    def prometheus():
        s = session(ca)
        while not stop.is_set():
            started = time.perf_counter()
            try:
                ok = s.get(side.url, headers={"Authorization": f"Bearer {token}"}, timeout=10).ok
            except requests.RequestException:
                ok = False
            if ok:
                legit.append((time.perf_counter() - started) * 1e3)
            else:
                legit_failed[0] += 1
            time.sleep(0.5)

    threads = [threading.Thread(target=attacker) for _ in range(FLOOD_CLIENTS)]
    threads.append(threading.Thread(target=prometheus))
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    return {
        "statuses": dict(statuses),
        "legit_p50": statistics.median(legit) if legit else float("inf"),
        "legit_max": max(legit) if legit else float("inf"),
        "legit_failed": legit_failed[0],
        "rss": side.rss(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=330)
    ap.add_argument("--interval", type=float, default=5)
    ap.add_argument("--flood", type=float, default=10)
    opts = ap.parse_args()
    proxy = kube_rbac_proxy_binary()
    with tempfile.TemporaryDirectory(prefix="bench-rbac-") as tmp:
        work = Path(tmp)
        policy = work / "audit-policy.json"
        policy.write_text(json.dumps(AUDIT_POLICY))
        audit = Audit(work / "audit.log")
        extra = ["--audit-policy-file", str(policy), "--audit-log-path", str(audit.path)]
        with apiserver_on_new_etcd(work / "kube", extra_args=extra) as api:
            version = api.admin.get("/version")["gitVersion"]
            report = run(opts, api, work, audit, proxy)
    write(opts, report, version, version_line(proxy))


def run(opts, api, work: Path, audit: Audit, proxy: str) -> dict:
    reviewer = list(kuberbac.RBAC_RULES)
    token = service_account(api, "prometheus", METRICS_READER, work).token
    accounts = {
        name: service_account(api, name, reviewer, work)
        for name in ("in-process", "in-process-5m", "sidecar")
    }
    ca = TestCA(work, "ca")
    cert, key = ca.issue("server", "subjectAltName=IP:127.0.0.1")
    web = work / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    collectors = ["--collector.disable-defaults", "--collector.neighbor"]
    procs: list[Proc] = []

    def start(argv, port, name):
        proc = Proc(argv, work / f"{name}.log", cwd=peers.ROOT)
        procs.append(proc)
        wait_for_port(port, proc=proc, timeout=30)
        return proc

    def in_process(name, *flags):
        port = free_port()
        kubeconfig = accounts[name].kubeconfig
        argv = exporter_argv(
            port,
            [*collectors, "--web.config.file", str(web), "--web.kube-rbac"]
            + ["--kube.kubeconfig", kubeconfig, *flags],
        )
        proc = start(argv, port, name)
        return Side(
            name, f"https://127.0.0.1:{port}/metrics", {"exporter": proc}, accounts[name].name
        )

    try:
        ours = in_process("in-process")
        ours_5m = in_process("in-process-5m", "--web.kube-rbac.cache-ttl", "5m")
        upstream = free_port()
        plain = start(exporter_argv(upstream, collectors), upstream, "upstream")
        port = free_port()
        sidecar_proc = start(
            [
                proxy,
                f"--secure-listen-address=127.0.0.1:{port}",
                f"--upstream=http://127.0.0.1:{upstream}/",
                f"--kubeconfig={accounts['sidecar'].kubeconfig}",
                f"--tls-cert-file={cert}",
                f"--tls-private-key-file={key}",
            ],
            port,
            "kube-rbac-proxy",
        )
        sidecar = Side(
            "sidecar",
            f"https://127.0.0.1:{port}/metrics",
            {"exporter": plain, "kube-rbac-proxy": sidecar_proc},
            accounts["sidecar"].name,
        )
        floor = Side("none", f"http://127.0.0.1:{upstream}/metrics", {"exporter": plain}, None)
        report = {
            "per_scrape": {
                side.name: per_scrape(side, token, ca.crt, opts.scrapes, audit)
                for side in (ours, sidecar, floor)
            }
        }
        over_time([ours_5m], token, ca.crt, 0.1, 1)  # its first review, before the window
        time.sleep(1)
        before = audit.counts()
        started = time.monotonic()
        report["failures"] = over_time(
            [ours, ours_5m, sidecar], token, ca.crt, opts.seconds, opts.interval
        )
        report["elapsed"] = time.monotonic() - started
        time.sleep(1)
        after = audit.counts()
        report["over_time"] = {s.name: audit.of(s, before, after) for s in (ours, ours_5m, sidecar)}
        report["flood"] = {}
        for side in (ours, sidecar):
            before = audit.counts()
            report["flood"][side.name] = flood(side, token, ca.crt, opts.flood)
            time.sleep(1)
            report["flood"][side.name]["reviews"] = audit.of(side, before, audit.counts())
        return report
    finally:
        for proc in procs:
            proc.stop()


def write(opts, report, apiserver_version, proxy_version) -> None:
    print(json.dumps(report, indent=1))
    scrape, over, fl = report["per_scrape"], report["over_time"], report["flood"]
    total = {name: sum(r["rss"].values()) for name, r in scrape.items()}
    rows = [
        (
            "RSS of the pod's processes after the scrapes, MiB",
            total["in-process"],
            total["sidecar"],
            "{:.1f}",
        ),
        ("scrape latency p50, ms", scrape["in-process"]["p50"], scrape["sidecar"]["p50"], "{:.1f}"),
        ("scrape latency p99, ms", scrape["in-process"]["p99"], scrape["sidecar"]["p99"], "{:.1f}"),
        (
            "CPU per scrape, ms (all the pod's processes)",
            scrape["in-process"]["cpu_ms"],
            scrape["sidecar"]["cpu_ms"],
            "{:.2f}",
        ),
    ]
    hour = 3600 / report["elapsed"]

    def per_second_at_scale(reviews):
        return sum(reviews) * NODES / report["elapsed"]

    lines = [
        "# --web.kube-rbac in process beside the kube-rbac-proxy sidecar",
        "",
        f"`python -m bench.kube_rbac` on {platform.node()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: real kube-apiserver "
        f"{apiserver_version} (the reviews counted in its audit log, by reviewer), the exporter "
        f"with its neighbor collector; peer: {proxy_version} (.ci/bench.d/42-kube-rbac-proxy.sh) "
        "with TLS in front of the exporter on plain HTTP, as kube-prometheus runs it; ours: "
        f"{peers.ours()}, TLS (--web.config.file) and --web.kube-rbac. Prometheus' service-account token, one "
        "kept-alive connection. Machine: 2 cores, shared.",
        "",
        f"## Per scrape ({opts.scrapes} scrapes, one target at a time)",
        "",
        "| measure | in process | sidecar | sidecar - in process | sidecar / in process |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, a, b, fmt in rows:
        lines.append(
            f"| {name} | {fmt.format(a)} | {fmt.format(b)} | {fmt.format(b - a)} | {b / a:.1f}x |"
        )
    side_rss = scrape["sidecar"]["rss"]
    lines += [
        "",
        f"The sidecar's RSS: the exporter {side_rss['exporter']:.1f} MiB and kube-rbac-proxy "
        f"{side_rss['kube-rbac-proxy']:.1f} MiB; at {NODES:,} nodes the difference is "
        f"{(total['sidecar'] - total['in-process']) * NODES / 1024:,.0f} GiB. With no "
        f"authorization at all (the exporter on plain HTTP): p50 {scrape['none']['p50']:.1f} ms, "
        f"p99 {scrape['none']['p99']:.1f} ms, {scrape['none']['cpu_ms']:.2f} ms CPU. Reviews "
        f"during these scrapes (TokenReview, SubjectAccessReview): in process "
        f"{tuple(scrape['in-process']['reviews'])}, sidecar {tuple(scrape['sidecar']['reviews'])}: "
        "both answer a known token from their caches.",
        "",
        f"## The API server's load over time ({report['elapsed']:.0f} s, a scrape every "
        f"{opts.interval:g} s, every target at once)",
        "",
        "| target | TokenReviews | SubjectAccessReviews | per hour per pod | per second at "
        f"{NODES:,} nodes |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, label in (
        ("in-process", "in process, --web.kube-rbac.cache-ttl 1m (default)"),
        ("in-process-5m", "in process, --web.kube-rbac.cache-ttl 5m"),
        ("sidecar", "kube-rbac-proxy (tokens cached 2 min, grants 5 min)"),
    ):
        tr, sar = over[name]
        lines.append(
            f"| {label} | {tr} | {sar} | {(tr + sar) * hour:.0f} | "
            f"{per_second_at_scale(over[name]):.0f} |"
        )
    lines += [
        "",
        "Ours asks again once a grant is past half its TTL (web/kuberbac.py), so a pod scraped "
        "at least every 30 s reviews its scraper's token every 30 s by default. Failed scrapes "
        f"meanwhile: {dict(report['failures']) or 'none'}.",
        "",
        f"## Flood ({opts.flood:g} s: {FLOOD_CLIENTS} clients, a new invalid token on every "
        "request, beside Prometheus every 0.5 s)",
        "",
        "| target | answers to the flood | TokenReviews | Prometheus' p50 ms | max ms | "
        "Prometheus' failures | RSS after, MiB |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, label in (("in-process", "in process"), ("sidecar", "kube-rbac-proxy")):
        f = fl[name]
        answers = ", ".join(f"{n} x {code}" for code, n in sorted(f["statuses"].items()))
        lines.append(
            f"| {label} | {answers} | {f['reviews'][0]} | {f['legit_p50']:.1f} | "
            f"{f['legit_max']:.1f} | {f['legit_failed']} | {sum(f['rss'].values()):.1f} |"
        )
    lines += [
        "",
        "Ours answers past its review limit (4 at once, 20 a second) with 429 at once; "
        "kube-rbac-proxy's client holds its reviews to client-go's default 5 a second (burst "
        "10) and the flood's requests wait for them.",
    ]
    peers.report(RESULTS, lines)


if __name__ == "__main__":
    main()
