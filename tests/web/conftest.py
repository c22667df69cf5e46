"""Certificates made by openssl, web config files, and the real exporter process."""

import subprocess
import sys

import bcrypt
import pytest

import testbed.exporter
from testbed.exporter import MODULE, REPO
from testbed.pki import TestCA

PASSWORD = "s3cret-scrape"
# The CAs use EC keys, the leaves RSA: both kinds of key are exercised.
EC_P256 = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256")


class PKI:
    """A CA, a server certificate for 127.0.0.1/localhost, and client certificates."""

    def __init__(self, root):
        self.root = str(root)
        ca = TestCA(root, "ca", "kube-scale-exporter test CA", EC_P256)
        rogue = TestCA(root, "rogue-ca", "someone else's CA", EC_P256)
        self._authorities = {"ca": ca, "rogue-ca": rogue}
        self.ca, self.rogue_ca = ca.crt, rogue.crt
        self.server = ca.issue("server", "subjectAltName=DNS:localhost,IP:127.0.0.1")
        self.client = ca.issue("client", "subjectAltName=DNS:prometheus.test")
        self.other_client = ca.issue("other", "subjectAltName=DNS:intruder.test")
        self.rogue_client = rogue.issue("rogue", "subjectAltName=DNS:prometheus.test")

    def leaf(self, name, ca, extensions):
        """Another certificate, signed by "ca" or "rogue-ca": (cert path, key path)."""
        return self._authorities[ca].issue(name, extensions)


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    return PKI(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def password():
    """(plain password, its bcrypt hash at cost 10)."""
    return PASSWORD, bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()


@pytest.fixture
def start_exporter(tmp_path):
    """start_exporter(config_text) runs `python -m kube_scale_exporter` with that web config.

    flags: more command-line flags; nofile: (soft, hard) open-files limit to start it with,
    as a container runtime would set it (containerd 2: 1024 soft)."""
    started = []

    def start(config_text=None, scheme="https", config_path=None, flags=(), nofile=None):
        config = config_path or tmp_path / f"web-{len(started)}.yml"
        if config_text is not None:
            config.write_text(config_text)
        argv = ["--collector.disable-defaults"]
        if config_text is not None or config_path:
            argv += ["--web.config.file", str(config)]
        prefix = ["prlimit", f"--nofile={nofile[0]}:{nofile[1]}", "--"] if nofile else ()
        exporter = testbed.exporter.start_exporter(
            [*argv, *flags], tmp_path, scheme=scheme, prefix=prefix, timeout=15
        )
        started.append(exporter.proc)
        return exporter

    yield start
    for proc in started:
        proc.stop()


@pytest.fixture
def run_exporter():
    """run_exporter(*flags): the exporter run to completion, for flags that make it exit."""

    def run(*argv, timeout=20):
        return subprocess.run(
            [sys.executable, "-m", MODULE, *argv],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run
