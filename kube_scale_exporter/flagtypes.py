"""Value types of command-line flags, for argparse's `type=`: one home for every module.

Each raises argparse.ArgumentTypeError with the value it refused, so that argparse exits 2
with a message naming the flag.
"""

from __future__ import annotations

import argparse
import os
import re

from kube_scale_exporter.durations import MAX_SECONDS, go_duration

_SIZE = re.compile(r"^(\d+)(Ki|Mi|Gi|Ti)?$")
_UNITS = {None: 1, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4}


def listen_address(value: str) -> tuple[str, int]:
    """HOST:PORT, :PORT or [IPv6]:PORT."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT or :PORT, got {value!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def telemetry_path(value: str) -> str:
    if not value.startswith("/") or value in ("/", "/healthz"):
        raise argparse.ArgumentTypeError(
            f"must start with / and not be / or /healthz, got {value!r}"
        )
    return value


def existing_dir(value: str) -> str:
    if not os.path.isdir(value):
        raise argparse.ArgumentTypeError(f"no such directory: {value!r}")
    return value


def existing_file(value: str) -> str:
    if not os.path.isfile(value):
        raise argparse.ArgumentTypeError(f"no such file: {value!r}")
    return value


def non_negative_int(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {value!r}")
    return int(value)


def positive_int(value: str) -> int:
    if not value.isdigit() or int(value) == 0:
        raise argparse.ArgumentTypeError(f"expected a whole number > 0, got {value!r}")
    return int(value)


def byte_size(value: str) -> int:
    """Bytes as a whole number, optionally with Ki, Mi, Gi or Ti."""
    match = _SIZE.match(value.strip())
    if not match or int(match.group(1)) == 0:
        raise argparse.ArgumentTypeError(f"expected bytes such as 8589934592 or 8Gi, got {value!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]


def duration(value: str) -> float:
    """Seconds: "120", or a Go duration as Kubernetes users write it, "90s", "2m"."""
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            seconds = go_duration(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a duration such as 120, 90s or 2m, got {value!r}"
            ) from None
    if not 0 < seconds <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be more than 0 and finite, got {value!r}")
    return seconds
