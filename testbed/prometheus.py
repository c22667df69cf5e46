"""Prometheus on a free loopback port, for tests and the demo: the newest release the tests
run by default, or any release's binary (`binary=`, e.g. `binary("3.13", "prometheus")`).

    with PrometheusServer(workdir, {"scrape_configs": [...]}) as prom:
        prom.query('up{job="x"}')            # the instant query's result list

The config is a dict (written as JSON, which is YAML); rule files and extra flags may be
given. `start` returns once /-/ready answers, i.e. the TSDB is loaded.
"""

import json
import time

import requests

from . import builds
from .ports import free_port
from .procs import Proc, wait_for_port

# The Prometheus releases the tests run (every rule test on each): 3.13, the LTS, and 3.16,
# the newest, each built from the Go module proxy by .ci/setup.d/15-prometheus.sh (the
# versions its .ci/go/prometheus-3.N/go.mod pin; $PROMETHEUS_3_13_DIR, $PROMETHEUS_3_16_DIR
# point elsewhere).
RELEASES = ("3.13", "3.16")
NEWEST = RELEASES[-1]
NAMES = ("prometheus", "promtool")


def binary(release: str, name: str) -> str:
    """`name` (prometheus or promtool) of a release; missing, the error names its step."""
    if release not in RELEASES:
        raise ValueError(f"Prometheus {release}: the tests run {', '.join(RELEASES)}")
    return builds.prometheus_binary(release, name)


def newest(name: str) -> str:
    """`name` of the newest release: what runs where one Prometheus is enough."""
    return binary(NEWEST, name)


def version(release: str) -> str:
    """The version a release's binaries are (e.g. "3.16.0"), as their go.mod pins it."""
    return builds.prometheus_version(release)


class PrometheusServer:
    def __init__(self, workdir, config: dict, extra_args=(), binary=None):
        self.workdir = workdir
        self.config = config
        self.extra_args = list(extra_args)
        self.binary = binary or newest("prometheus")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.session = requests.Session()
        self.session.trust_env = False  # this machine's proxy/CA variables are not for loopback
        self.proc = None

    def start(self, timeout=60.0) -> "PrometheusServer":
        config = self.workdir / "prometheus.yml"
        config.write_text(json.dumps(self.config, indent=2))
        self.proc = Proc(
            [
                self.binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                *self.extra_args,
            ],
            self.workdir / "prometheus.log",
        )
        wait_for_port(self.port, proc=self.proc, timeout=timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.session.get(self.url + "/-/ready", timeout=2).ok:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"Prometheus not ready:\n{self.proc.log_tail()}")

    def query(self, expr: str) -> list:
        reply = self.session.get(
            self.url + "/api/v1/query", params={"query": expr}, timeout=5
        ).json()
        return reply["data"]["result"] if reply.get("status") == "success" else []

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def __enter__(self) -> "PrometheusServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
