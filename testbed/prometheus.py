"""Prometheus on a free loopback port, for tests and the demo: Debian's by default, or any
release's binary (`binary=`, e.g. Prometheus 3.5 unpacked by .ci/setup.d/15-prometheus-sid.sh).

    with PrometheusServer(workdir, {"scrape_configs": [...]}) as prom:
        prom.query('up{job="x"}')            # the instant query's result list

The config is a dict (written as JSON, which is YAML); rule files and extra flags may be
given. `start` returns once /-/ready answers, i.e. the TSDB is loaded.
"""

import json
import os
import shutil
import time

import requests

from .ports import free_port
from .procs import Proc, wait_for_port

# The Prometheus releases the tests run (the rules, the live mixin test): Debian's
# (bookworm, on PATH) and the current upstream one users run, Debian sid's unpacked into a
# cache by .ci/setup.d/15-prometheus-sid.sh (PROMETHEUS3_BIN / PROMTOOL3_BIN, the same
# variables). Each finder gives the binary's path, None or a missing path when absent.
SETUP_STEPS = {"2.42": "10-base.sh", "3.5": "15-prometheus-sid.sh"}
SID_BIN = "/var/cache/kube-scale-exporter/prometheus-sid/root/usr/bin"
RELEASES = {
    "2.42": {
        "promtool": lambda: shutil.which("promtool"),
        "prometheus": lambda: shutil.which("prometheus"),
    },
    "3.5": {
        "promtool": lambda: os.environ.get("PROMTOOL3_BIN", f"{SID_BIN}/promtool"),
        "prometheus": lambda: os.environ.get("PROMETHEUS3_BIN", f"{SID_BIN}/prometheus"),
    },
}


def binary(release: str, name: str) -> str:
    """`name` (prometheus or promtool) of a release; missing, the error names its step."""
    path = RELEASES[release][name]()
    if not path or not os.access(path, os.X_OK):
        where = f"{path} is missing" if path else f"no {name} on PATH"
        raise FileNotFoundError(f"{where} (.ci/setup.d/{SETUP_STEPS[release]})")
    return path


class PrometheusServer:
    def __init__(self, workdir, config: dict, extra_args=(), binary="prometheus"):
        self.workdir = workdir
        self.config = config
        self.extra_args = list(extra_args)
        self.binary = binary
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
