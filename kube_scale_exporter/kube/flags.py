"""The `--kube.*` flags, shared by every collector that reads the Kubernetes API."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from kube_scale_exporter.flagtypes import existing_file

if TYPE_CHECKING:
    from .client import KubeClient


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Kubernetes API")
    group.add_argument(
        "--kube.kubeconfig",
        dest="kube_kubeconfig",
        type=existing_file,
        default=None,
        metavar="PATH",
        help="kubeconfig file for running outside a cluster (default: $KUBECONFIG, else the "
        "pod's service account).",
    )
    group.add_argument(
        "--kube.node-name",
        dest="kube_node_name",
        default=os.environ.get("NODE_NAME", ""),
        metavar="NAME",
        help="This node's name, for node mode's spec.nodeName watches (default: $NODE_NAME, "
        "set from the downward API).",
    )


def client_from_args(args) -> KubeClient:
    """A client for the configured API server; ConfigError says what is missing."""
    from .client import KubeClient  # noqa: PLC0415  (only where a client is made)
    from .config import load  # noqa: PLC0415

    return KubeClient(load(getattr(args, "kube_kubeconfig", None)))


def kubeconfig_problem(args) -> str | None:
    """Why the API server configuration the flags give cannot be loaded, as a usage message
    naming the flag; None when it loads. A collector's validate() raises it as a
    UsageError (exit 2), so a broken kubeconfig fails at start, not at the first scrape."""
    from .config import ConfigError, load  # noqa: PLC0415  (as in client_from_args)

    given = getattr(args, "kube_kubeconfig", None)
    try:
        load(given).close()
    except ConfigError as exc:
        # load() names its source, the flag included, in every error about a given file.
        return str(exc) if given else f"--kube.kubeconfig: {exc}"
    return None
