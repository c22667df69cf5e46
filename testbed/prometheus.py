"""Prometheus on a free loopback port, for tests and the demo: Debian's by default, or any
release's binary (`binary=`, e.g. Prometheus 3.5 unpacked by .ci/setup.d/15-prometheus-sid.sh).

    with PrometheusServer(workdir, {"scrape_configs": [...]}) as prom:
        prom.query('up{job="x"}')            # the instant query's result list

The config is a dict (written as JSON, which is YAML); rule files and extra flags may be
given. `start` returns once /-/ready answers, i.e. the TSDB is loaded.
"""

import json
import time

import requests

from .ports import free_port
from .procs import Proc, wait_for_port


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
