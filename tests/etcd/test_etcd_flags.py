"""Flag handling: bad values exit 2 with a message naming the flag; good ones reach the collector."""

import subprocess
import sys

import pytest

from kube_scale_exporter.cli import parse
from kube_scale_exporter.collectors.etcd.config import local_specs, tls_files
from kube_scale_exporter.etcd.client import TLSFiles

BAD = [
    (["--etcd.cluster", "main"], "--etcd.cluster"),
    (["--etcd.cluster", "Main=http://127.0.0.1:2379"], "--etcd.cluster"),
    (["--etcd.cluster", "main="], "--etcd.cluster"),
    (["--etcd.cluster", "main=127.0.0.1:2379"], "--etcd.cluster"),
    (["--etcd.cluster", "main=http://127.0.0.1"], "--etcd.cluster"),
    (["--etcd.cluster", "main=http://127.0.0.1:2379/v3"], "--etcd.cluster"),
    (
        [
            "--etcd.cluster",
            "main=http://127.0.0.1:2379",
            "--etcd.cluster",
            "main=http://127.0.0.1:2380",
        ],
        "--etcd.cluster",
    ),
    (["--etcd.cluster", "main=http://127.0.0.1:2379", "--etcd.timeout", "0"], "--etcd.timeout"),
    (
        ["--etcd.cluster", "main=http://127.0.0.1:2379", "--etcd.quota-bytes", "2GB"],
        "--etcd.quota-bytes",
    ),
    (
        ["--etcd.cluster", "main=http://127.0.0.1:2379", "--etcd.min-interval", "-1"],
        "--etcd.min-interval",
    ),
    (
        ["--etcd.cluster", "main=http://127.0.0.1:2379", "--etcd.keys-interval", "x"],
        "--etcd.keys-interval",
    ),
    (
        ["--etcd.cluster", "main=http://127.0.0.1:2379", "--etcd.keys-prefix", "registry"],
        "--etcd.keys-prefix",
    ),
    (
        ["--etcd.cluster", "main=http://127.0.0.1:2379", "--etcd.keys-max-resources", "0"],
        "--etcd.keys-max-resources",
    ),
    (
        ["--etcd.cluster", "main=https://127.0.0.1:2379", "--etcd.ca-file", "/nonexistent/ca.crt"],
        "--etcd.ca-file",
    ),
    (
        ["--etcd.cluster", "main=https://127.0.0.1:2379", "--etcd.cert-file", "/etc/hostname"],
        "--etcd.key-file",
    ),
    # no kubeadm certificates on this machine
    (["--etcd.local", "--etcd.local-access=full"], "--etcd.local-access"),
    (["--etcd.local-access=full"], "--etcd.local-access"),  # without --etcd.local
    (["--etcd.local", "--etcd.local-access=root"], "--etcd.local-access"),
    # the key-less --etcd.local already reads /metrics
    (["--etcd.local", "--etcd.metrics-url", "main=http://127.0.0.1:2381"], "--etcd.metrics-url"),
    (
        ["--etcd.cluster", "main=http://127.0.0.1:2379", "--etcd.metrics-url", "main"],
        "--etcd.metrics-url",
    ),
    (
        [
            "--etcd.cluster",
            "main=http://127.0.0.1:2379",
            "--etcd.metrics-url",
            "main=127.0.0.1:2381",
        ],
        "--etcd.metrics-url",
    ),
    (
        [
            "--etcd.cluster",
            "main=http://127.0.0.1:2379",
            "--etcd.metrics-url",
            "main=http://{hots}:2381",
        ],
        "--etcd.metrics-url",
    ),
    (
        [
            "--etcd.cluster",
            "main=http://127.0.0.1:2379",
            "--etcd.metrics-url",
            "events=http://127.0.0.1:2381",
        ],
        "--etcd.metrics-url",
    ),
    (
        [
            "--etcd.cluster",
            "main=http://127.0.0.1:2379",
            "--etcd.metrics-url",
            "main=http://127.0.0.1:2381",
            "--etcd.metrics-url",
            "main=http://127.0.0.2:2381",
        ],
        "--etcd.metrics-url",
    ),
    (["--etcd.metrics-url", "main=http://127.0.0.1:2381"], "--etcd.metrics-url"),
]


@pytest.mark.unit
@pytest.mark.parametrize("argv,flag", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_values_exit_2_naming_the_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as exc:
        parse(["--mode", "cluster", *argv])
    assert exc.value.code == 2
    assert flag in capsys.readouterr().err


@pytest.mark.integration
def test_exit_status_of_the_real_command():
    run = subprocess.run(
        [sys.executable, "-m", "kube_scale_exporter", "--etcd.cluster", "main=nope"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2 and "--etcd.cluster" in run.stderr


@pytest.mark.unit
def test_good_values_and_defaults():
    args, classes = parse(
        [
            "--mode",
            "node",
            "--etcd.cluster",
            "main=http://127.0.0.1:2379,http://[::1]:2379",
            "--etcd.cluster",
            "events=https://127.0.0.1:2382/",
            "--etcd.quota-bytes",
            "8Gi",
            "--etcd.keys-prefix",
            "/kube",
        ]
    )
    assert "etcd" in [c.name for c in classes]
    assert args.etcd_clusters == [
        ("main", ("http://127.0.0.1:2379", "http://[::1]:2379")),
        ("events", ("https://127.0.0.1:2382",)),
    ]
    assert args.etcd_quota_bytes == 8 * 1024**3 and args.etcd_keys_prefix == "/kube/"
    assert (args.etcd_timeout, args.etcd_min_interval, args.etcd_keys_interval) == (
        2.0,
        15.0,
        300.0,
    )
    args, _ = parse(
        [
            "--etcd.local",
            "--etcd.local-access=full",
            "--etcd.ca-file",
            "/etc/hostname",
            "--etcd.cert-file",
            "/etc/hostname",
            "--etcd.key-file",
            "/etc/hostname",
        ]
    )
    assert local_specs(args) == [("main", ("https://127.0.0.1:2379",))]
    # Without a key by default: kubeadm's metrics listener, no TLS files, nothing to read.
    args, _ = parse(["--etcd.local"])
    assert local_specs(args) == [("main", ("http://127.0.0.1:2381",))]
    assert tls_files(args) == TLSFiles()


@pytest.mark.unit
def test_off_unless_configured():
    _, classes = parse(["--mode", "cluster"])
    assert "etcd" not in [c.name for c in classes]
