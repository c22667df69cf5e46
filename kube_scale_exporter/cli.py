"""Command line: `kube-scale-exporter [flags]` serves metrics; `... check [flags]` advises.

Flags follow node_exporter's names so that operators can guess them. Any bad flag or
value exits with status 2 and a message that names the flag.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from kube_scale_exporter import PYTHON_VERSION, __version__, kube
from kube_scale_exporter.collectors import COLLECTORS
from kube_scale_exporter.flagtypes import (
    duration,
    existing_dir,
    listen_address,
    non_negative_int,
    positive_int,
    telemetry_path,
)
from kube_scale_exporter.process import ProcessMetrics
from kube_scale_exporter.registry import (
    MODES,
    Collector,
    UsageError,
    add_collector_flags,
    enabled_collectors,
)

log = logging.getLogger("kube_scale_exporter")

DEFAULT_PORT = 9867
LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}


def web_config(value: str):
    """--web.config.file: load and check it now, so a mistake exits 2 before serving."""
    from kube_scale_exporter.web.config import WebConfigError, load  # noqa: PLC0415

    try:
        return load(value)
    except WebConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser(prog: str = "kube-scale-exporter") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        allow_abbrev=False,
        description="Prometheus exporter for the failures of very large Kubernetes clusters. "
        "`kube-scale-exporter check [flags]` runs the enabled collectors once and "
        "prints what to change.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--mode",
        choices=MODES,
        default="node",
        help="node: per-node signals (DaemonSet, hostNetwork); "
        "cluster: cluster-wide signals (one Deployment). Default node.",
    )
    parser.add_argument(
        "--web.listen-address",
        dest="listen",
        type=listen_address,
        default=("", DEFAULT_PORT),
        metavar="HOST:PORT",
        help=f"Address to serve on (default :{DEFAULT_PORT}).",
    )
    parser.add_argument(
        "--web.telemetry-path",
        dest="telemetry_path",
        type=telemetry_path,
        default="/metrics",
        help="Path for metrics (default /metrics).",
    )
    parser.add_argument(
        "--web.config.file",
        dest="web_config",
        type=web_config,
        default=None,
        metavar="FILE",
        help="exporter-toolkit web config (TLS, mTLS, basic auth); see "
        "docs/deploy.md. Default: plain HTTP, no auth.",
    )
    parser.add_argument(
        "--web.kube-rbac",
        dest="kube_rbac",
        action="store_true",
        help="Serve every path but /healthz only to a bearer token the Kubernetes API "
        "server authenticates (TokenReview) and allows to get the telemetry path "
        "(SubjectAccessReview); uses the --kube.* client. See docs/deploy.md.",
    )
    parser.add_argument(
        "--web.kube-rbac.cache-ttl",
        dest="kube_rbac_ttl",
        type=duration,
        default=60.0,
        help="How long an allowed token is trusted without asking again (default 1m); "
        "refusals are cached 5s at most.",
    )
    parser.add_argument(
        "--web.max-requests",
        dest="max_requests",
        type=non_negative_int,
        default=40,
        help="Concurrent scrapes allowed; more get 503. 0 means no limit (default 40).",
    )
    parser.add_argument(
        "--web.idle-timeout",
        dest="idle_timeout",
        type=duration,
        default=120.0,
        help="Close a connection that sends no request for this long (default 2m).",
    )
    parser.add_argument(
        "--web.max-connections",
        dest="max_connections",
        type=positive_int,
        default=512,
        help="Open connections allowed; past it the oldest "
        "idle one is closed for each new one (default 512).",
    )
    parser.add_argument(
        "--web.process-metrics",
        dest="process_metrics",
        action="store_true",
        help="Also export the client library's process_* and python_* series "
        "(off: they cost ~16 series per node).",
    )
    parser.add_argument(
        "--scrape.timeout",
        dest="scrape_timeout",
        type=duration,
        default=10.0,
        help="Longest a scrape may take when Prometheus sends no "
        "X-Prometheus-Scrape-Timeout-Seconds (default 10s); "
        "also caps that header.",
    )
    parser.add_argument(
        "--path.procfs",
        dest="procfs",
        type=existing_dir,
        default="/proc",
        help="procfs mount point, e.g. /host/proc in a container (default /proc).",
    )
    parser.add_argument(
        "--path.sysfs",
        dest="sysfs",
        type=existing_dir,
        default="/sys",
        help="sysfs mount point, e.g. /host/sys in a container (default /sys).",
    )
    parser.add_argument(
        "--log.level",
        dest="log_level",
        choices=LOG_LEVELS,
        default="info",
        help="Least severe log level printed (default info).",
    )
    kube.add_arguments(parser)
    add_collector_flags(parser, COLLECTORS)
    return parser


def parse(argv: list[str], prog: str = "kube-scale-exporter", check: bool = False):
    """Parse flags and choose collectors; exits 2 with a message naming the bad flag.

    `args.check` tells collectors they run once for `check`, which may read more than a
    scrape does (the neighbor dump).
    """
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    args.check = check
    if args.kube_rbac and args.web_config is not None and args.web_config.users:
        parser.error(
            "--web.kube-rbac and basic auth in --web.config.file both use the "
            "Authorization header: choose one"
        )
    try:
        classes = enabled_collectors(args, COLLECTORS)
    except UsageError as exc:
        parser.error(str(exc))
    return args, classes


# glibc's mallopt parameter for the most malloc arenas (malloc.h), and how many we keep.
M_ARENA_MAX = -8
MALLOC_ARENAS = 2


def limit_malloc_arenas() -> None:
    """At most MALLOC_ARENAS malloc arenas, set before any thread starts.

    glibc gives each thread that allocates an arena of its own, up to 8 per core, and the
    pages freed in each stay resident: the web workers, the collectors' threads and the
    watches grew a node pod by ~5 MiB over 10,000 scrapes, more on a node with more cores
    (bench/results/node_memory.md). Their allocations are small and seldom concurrent, so
    two arenas cost no measurable CPU. Where the C library is not glibc this does nothing.
    """
    import ctypes  # noqa: PLC0415  (0.2 MiB: only for this call)

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(M_ARENA_MAX, MALLOC_ARENAS)


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=LOG_LEVELS[level],
        stream=sys.stderr,
        format="ts=%(asctime)s level=%(levelname)s logger=%(name)s msg=%(message)r",
    )


def instantiate(classes: list[type[Collector]], args) -> list[Collector]:
    collectors = [cls(args) for cls in classes]
    for c in collectors:
        c.start()
    return collectors


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    limit_malloc_arenas()
    if argv[:1] == ["check"]:
        from kube_scale_exporter.check import run_check  # noqa: PLC0415

        args, classes = parse(argv[1:], prog="kube-scale-exporter check", check=True)
        setup_logging(args.log_level)
        return run_check(instantiate(classes, args), args.scrape_timeout, sys.stdout)
    args, classes = parse(argv)
    setup_logging(args.log_level)
    return serve(args, instantiate(classes, args))


def make_scraper(collectors: list[Collector]):
    """The serving scraper: the collectors, plus the health of the API watches they run."""
    from kube_scale_exporter.scrape import Scraper  # noqa: PLC0415

    return Scraper(collectors, sources=[kube.watch_health(collectors)])


def serve(args, collectors: list[Collector]) -> int:
    from kube_scale_exporter.web.routes import App, make_server  # noqa: PLC0415

    process_metrics = ProcessMetrics().families if args.process_metrics else None
    scraper = make_scraper(collectors)
    web = None
    if args.web_config:
        from kube_scale_exporter.web.live import LiveWebConfig  # noqa: PLC0415  (yaml, bcrypt)

        web = LiveWebConfig(args.web_config)
    rbac = None
    if args.kube_rbac:
        from kube_scale_exporter.web.kuberbac import KubeRBAC  # noqa: PLC0415

        try:
            client = kube.client_from_args(args)
        except kube.ConfigError as exc:
            log.error("--web.kube-rbac: no Kubernetes client: %s", exc)
            scraper.close()
            return 2
        rbac = KubeRBAC(client, args.telemetry_path, ttl=args.kube_rbac_ttl)
    app = App(
        scraper,
        args.telemetry_path,
        args.scrape_timeout,
        args.max_requests,
        process_metrics,
        web=web,
        kube_rbac=rbac,
    )
    host, port = args.listen
    try:
        server = make_server(app, host, port, args.idle_timeout, args.max_connections)
    except OSError as exc:
        log.error("--web.listen-address: cannot listen on %s:%d: %s", host, port, exc)
        scraper.close()
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    thread.start()
    log.info(
        "kube-scale-exporter %s (Python %s) mode=%s collectors=%s listening on %s:%d "
        "tls=%s basic_auth=%s kube_rbac=%s",
        __version__,
        PYTHON_VERSION,
        args.mode,
        ",".join(c.name for c in collectors) or "none",
        host or "*",
        server.server_port,
        bool(args.web_config and args.web_config.tls),
        bool(args.web_config and args.web_config.users),
        args.kube_rbac,
    )
    stop.wait()
    log.info("shutting down")
    server.shutdown()
    server.server_close()
    scraper.close()
    return 0
