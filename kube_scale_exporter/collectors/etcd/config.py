"""The etcd collector's flag values: cluster specs, the key prefix and the TLS files."""

from __future__ import annotations

import argparse
import re
from urllib.parse import urlsplit

from kube_scale_exporter.etcd.client import TLSFiles

DEFAULT_QUOTA = 2 * 1024**3  # etcd's own default for --quota-backend-bytes
LOCAL_DEFAULT = "main=https://127.0.0.1:2379"
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


def keys_prefix(value: str) -> str:
    if not value.startswith("/"):
        raise argparse.ArgumentTypeError(f"must start with /, got {value!r}")
    return value if value.endswith("/") else value + "/"


def tls_files(args: argparse.Namespace) -> TLSFiles:
    """The TLS files given, or kubeadm's for --etcd.local over https without any given."""
    given = TLSFiles(args.etcd_ca_file, args.etcd_cert_file, args.etcd_key_file)
    local_https = any(url.startswith("https:") for _, urls in args.etcd_local for url in urls)
    if given == NO_TLS and local_https:
        return KUBEADM_TLS
    return given
