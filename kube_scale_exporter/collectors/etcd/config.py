"""The etcd collector's flags: their definitions, value types and checks, and the TLS
files and local clusters they resolve to."""

from __future__ import annotations

import argparse
import os
import re
from urllib.parse import urlsplit

from kube_scale_exporter.etcd.client import TLSFiles
from kube_scale_exporter.flagtypes import byte_size, duration, positive_int
from kube_scale_exporter.registry import UsageError

DEFAULT_QUOTA = 2 * 1024**3  # etcd's own default for --quota-backend-bytes
# --etcd.local without a value: kubeadm's member on this node, by --etcd.local-access.
# kubeadm serves its metrics without TLS on 127.0.0.1:2381 (--listen-metrics-urls).
LOCAL_DEFAULTS = {
    "metrics": ("main", ("http://127.0.0.1:2381",)),
    "full": ("main", ("https://127.0.0.1:2379",)),
}
NO_TLS = TLSFiles()
KUBEADM_TLS = TLSFiles(
    ca="/etc/kubernetes/pki/etcd/ca.crt",
    cert="/etc/kubernetes/pki/etcd/healthcheck-client.crt",
    key="/etc/kubernetes/pki/etcd/healthcheck-client.key",
)
_NAME = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$")


def cluster_spec(value: str) -> tuple[str, tuple[str, ...]]:
    """NAME=URL[,URL...] with http(s)://HOST:PORT URLs."""
    name, sep, urls = value.partition("=")
    if not sep or not _NAME.match(name):
        raise argparse.ArgumentTypeError(
            f"expected NAME=URL[,URL...] with NAME like main or events, got {value!r}"
        )
    endpoints = tuple(u.strip().rstrip("/") for u in urls.split(",") if u.strip())
    if not endpoints:
        raise argparse.ArgumentTypeError(f"no URL after {name}= in {value!r}")
    for url in endpoints:
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            port = None
        if (
            parts.scheme not in ("http", "https")
            or not parts.hostname
            or port is None
            or parts.path
            or parts.query
        ):
            raise argparse.ArgumentTypeError(f"expected http(s)://HOST:PORT, got {url!r}")
    return name, endpoints


def metrics_url_spec(value: str) -> tuple[str, tuple[str, ...]]:
    """NAME=URL[,URL...]: where the cluster's members serve /metrics (--listen-metrics-urls);
    a URL's host may be {host}, each member's client URL host."""
    name, urls = cluster_spec(value)
    for url in urls:
        host = urlsplit(url).hostname or ""
        if ("{" in host or "}" in host) and host != "{host}":
            raise argparse.ArgumentTypeError(
                f"the only placeholder is {{host}} (e.g. http://{{host}}:2381), got {url!r}"
            )
    return name, urls


def keys_prefix(value: str) -> str:
    if not value.startswith("/"):
        raise argparse.ArgumentTypeError(f"must start with /, got {value!r}")
    return value if value.endswith("/") else value + "/"


def local_specs(args: argparse.Namespace) -> list[tuple[str, tuple[str, ...]]]:
    """--etcd.local's clusters, the bare flag standing for kubeadm's member by access."""
    default = LOCAL_DEFAULTS[args.etcd_local_access]
    return [default if spec is None else spec for spec in args.etcd_local]


def tls_files(args: argparse.Namespace) -> TLSFiles:
    """The TLS files given, or kubeadm's healthcheck client pair for --etcd.local with
    --etcd.local-access=full over https without any given."""
    given = TLSFiles(args.etcd_ca_file, args.etcd_cert_file, args.etcd_key_file)
    local_https = any(url.startswith("https:") for _, urls in local_specs(args) for url in urls)
    if given == NO_TLS and local_https and args.etcd_local_access == "full":
        return KUBEADM_TLS
    return given


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--etcd.cluster",
        dest="etcd_clusters",
        action="append",
        type=cluster_spec,
        default=[],
        metavar="NAME=URL[,URL...]",
        help="An etcd cluster to watch, e.g. main=https://10.0.0.1:2379 (repeatable: "
        "main and events). Members are discovered from the member list and each "
        "is asked at its own client URL.",
    )
    group.add_argument(
        "--etcd.local",
        dest="etcd_local",
        action="append",
        type=cluster_spec,
        nargs="?",
        const=None,
        default=[],
        metavar="NAME=URL",
        help="For a DaemonSet pod on an etcd node: watch only this member. By default "
        "through its /metrics alone, without a client certificate (default "
        "main=http://127.0.0.1:2381, kubeadm's --listen-metrics-urls); see "
        "--etcd.local-access.",
    )
    group.add_argument(
        "--etcd.local-access",
        dest="etcd_local_access",
        choices=sorted(LOCAL_DEFAULTS),
        default="metrics",
        help="What --etcd.local reads. metrics (default): the member's /metrics at the "
        "--etcd.local URL; no key, but no alarm list, raft term or key counts. full: "
        "Status, alarms and key counts at the member's client URL (default "
        "main=https://127.0.0.1:2379) with kubeadm's healthcheck client certificate "
        "(or --etcd.ca-file/--etcd.cert-file/--etcd.key-file), a key that can read, "
        "write and delete every key in etcd, Secrets included. Key counts are taken "
        "only by the pod beside the leader.",
    )
    group.add_argument(
        "--etcd.metrics-url",
        dest="etcd_metrics_urls",
        action="append",
        type=metrics_url_spec,
        default=[],
        metavar="NAME=URL[,URL...]",
        help="Read the members of cluster NAME's /metrics (disk latency, read load, "
        "quota) here rather than at their client URL, for etcd's "
        "--listen-metrics-urls, e.g. main=http://{host}:2381 ({host}: each "
        "member's client URL host) or main=http://127.0.0.1:2381 with "
        "--etcd.local-access=full. URLs are matched to members by host (repeatable).",
    )
    for flag, dest, text in (
        ("--etcd.ca-file", "etcd_ca_file", "CA bundle that signed etcd's serving certificate."),
        (
            "--etcd.cert-file",
            "etcd_cert_file",
            "Client certificate for etcd (with --etcd.key-file).",
        ),
        ("--etcd.key-file", "etcd_key_file", "Client key for etcd (with --etcd.cert-file)."),
    ):
        group.add_argument(flag, dest=dest, default=None, metavar="FILE", help=text)
    group.add_argument(
        "--etcd.timeout",
        dest="etcd_timeout",
        type=duration,
        metavar="DURATION",
        default=2.0,
        help="Timeout of each request to etcd (default 2s).",
    )
    group.add_argument(
        "--etcd.quota-bytes",
        dest="etcd_quota_bytes",
        type=byte_size,
        default=DEFAULT_QUOTA,
        metavar="BYTES",
        help="Quota to assume when etcd tells neither in Status nor in "
        "/metrics (default 2Gi, etcd's default).",
    )
    group.add_argument(
        "--etcd.min-interval",
        dest="etcd_min_interval",
        type=duration,
        default=15.0,
        metavar="DURATION",
        help="Serve member status from cache when younger than this, "
        "whatever the number of scrapers (default 15s).",
    )
    group.add_argument(
        "--etcd.keys-interval",
        dest="etcd_keys_interval",
        type=duration,
        default=300.0,
        metavar="DURATION",
        help="Count keys per resource in the background this often (default 300s).",
    )
    group.add_argument(
        "--etcd.keys-prefix",
        dest="etcd_keys_prefix",
        type=keys_prefix,
        default="/registry/",
        metavar="PREFIX",
        help="Key prefix of Kubernetes objects (kube-apiserver --etcd-prefix; default /registry/).",
    )
    group.add_argument(
        "--etcd.keys-max-resources",
        dest="etcd_keys_max_resources",
        type=positive_int,
        default=100,
        metavar="N",
        help="Report at most this many resources per cluster, the "
        'largest; the rest are summed in resource="other" '
        "(default 100).",
    )


def validate(args: argparse.Namespace) -> None:
    """UsageError naming the flag for values that do not go together."""
    local = local_specs(args)
    seen = set()
    for flag, specs in (("--etcd.cluster", args.etcd_clusters), ("--etcd.local", local)):
        for name, _ in specs:
            if name in seen:
                raise UsageError(f"{flag}: cluster name {name!r} is given twice")
            seen.add(name)
    if args.etcd_local_access == "full" and not local:
        raise UsageError("--etcd.local-access: it says what --etcd.local reads; give --etcd.local")
    metrics_only = {name for name, _ in local} if args.etcd_local_access == "metrics" else set()
    named = set()
    for name, _ in args.etcd_metrics_urls:
        if name not in seen:
            raise UsageError(
                f"--etcd.metrics-url: no --etcd.cluster or --etcd.local is named {name!r}"
            )
        if name in metrics_only:
            raise UsageError(
                f"--etcd.metrics-url: --etcd.local {name} already is a metrics URL "
                "(--etcd.local-access=metrics)"
            )
        if name in named:
            raise UsageError(f"--etcd.metrics-url: cluster name {name!r} is given twice")
        named.add(name)
    if bool(args.etcd_cert_file) != bool(args.etcd_key_file):
        flag = "--etcd.key-file" if args.etcd_cert_file else "--etcd.cert-file"
        raise UsageError(f"{flag}: --etcd.cert-file and --etcd.key-file go together")
    tls = tls_files(args)
    flags = (
        ("--etcd.local-access",) * 3
        if tls is KUBEADM_TLS
        else ("--etcd.ca-file", "--etcd.cert-file", "--etcd.key-file")
    )
    for flag, path in zip(flags, (tls.ca, tls.cert, tls.key), strict=True):
        if path is not None and not os.access(path, os.R_OK):
            hint = (
                " (kubeadm's healthcheck client pair, the default of "
                "--etcd.local-access=full; give --etcd.ca-file, --etcd.cert-file and "
                "--etcd.key-file)"
                if flag == "--etcd.local-access"
                else ""
            )
            raise UsageError(f"{flag}: cannot read {path}{hint}")
