"""Thanos components on free loopback ports, for the mixin's tests past one Prometheus (the
binary from .ci/bench.d/16-thanos.sh; every component is a subcommand of it).

    sidecar = Sidecar(workdir, binary, prom).start()         # beside a running Prometheus
    query = Query(workdir, binary, [sidecar.grpc])            # ports are taken here
    ruler = Ruler(workdir, binary, query.url, rule_files, {"rule_replica": "0"})
    query.endpoints.append(ruler.grpc)                        # its records, queryable too
    query.start(), ruler.start()

Query answers the Prometheus HTTP API; `api()` returns the whole reply (warnings included),
`query()` only the result of one that succeeded.
"""

from __future__ import annotations

import re
import time

import requests
import yaml

from .ports import free_port
from .procs import Proc, wait_for_port


class _Component:
    def __init__(self, workdir, binary, name):
        self.workdir = workdir
        self.binary = binary
        self.name = name
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.grpc = f"127.0.0.1:{self.grpc_port}"
        self.session = requests.Session()
        self.session.trust_env = False  # this machine's proxy/CA variables are not for loopback
        self.proc = None

    def _args(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout=60.0):
        self.proc = Proc(
            [
                self.binary,
                *self._args(),
                f"--http-address=127.0.0.1:{self.http_port}",
                f"--grpc-address=127.0.0.1:{self.grpc_port}",
                "--log.level=info",
            ],
            self.workdir / f"{self.name}.log",
        )
        wait_for_port(self.http_port, proc=self.proc, timeout=timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.session.get(self.url + "/-/ready", timeout=2).ok:
                    return self
            except requests.RequestException:
                pass
            if not self.proc.alive():
                break
            time.sleep(0.2)
        raise TimeoutError(f"thanos {self.name} not ready:\n{self.proc.log_tail()}")

    def metric(self, name: str) -> dict[str, float]:
        """{label text: value} of one of its own /metrics series."""
        text = self.session.get(self.url + "/metrics", timeout=5).text
        pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", re.M)
        return {labels or "": float(value) for labels, value in pattern.findall(text)}

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class Sidecar(_Component):
    """The StoreAPI over one Prometheus: it reads the TSDB through Prometheus' remote read and
    adds the server's external labels (it refuses a server without any)."""

    def __init__(self, workdir, binary, prometheus, name="sidecar"):
        super().__init__(workdir, binary, name)
        self.prometheus = prometheus

    def _args(self) -> list[str]:
        return [
            "sidecar",
            f"--prometheus.url={self.prometheus.url}",
            f"--tsdb.path={self.prometheus.workdir / 'tsdb'}",
        ]


class Query(_Component):
    """Query over static StoreAPI endpoints. `strict` ones stay in the set when they stop
    answering, so a query they cannot serve fails (or warns, where partial responses are
    allowed); others are left out of every query after a failed health check, silently."""

    def __init__(self, workdir, binary, endpoints, replica_labels=(), strict=True, name="query"):
        super().__init__(workdir, binary, name)
        self.endpoints = list(endpoints)
        self.replica_labels = list(replica_labels)
        self.strict = strict
        self.config = workdir / f"{name}-endpoints.yaml"

    def _write_config(self) -> None:
        endpoints = [{"address": e, "strict": self.strict} for e in self.endpoints]
        self.config.write_text(yaml.safe_dump({"endpoints": endpoints}))

    def _args(self) -> list[str]:
        self._write_config()
        return [
            "query",
            f"--endpoint.sd-config-file={self.config}",
            *(f"--query.replica-label={label}" for label in self.replica_labels),
        ]

    def stores(self) -> dict[str, list[dict]]:
        """{component type: [endpoint status...]} as Query's /api/v1/stores reports them."""
        return self.session.get(self.url + "/api/v1/stores", timeout=5).json()["data"]

    def wait_for_endpoints(self, timeout: float = 60.0) -> None:
        """Until every endpoint answered its last health check."""
        deadline = time.monotonic() + timeout
        while True:
            healthy = {
                s["name"]
                for group in self.stores().values()
                for s in group
                if not s.get("lastError")
            }
            if set(self.endpoints) <= healthy:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"endpoints {set(self.endpoints) - healthy} not healthy")
            time.sleep(0.5)

    def api(self, path: str, **params) -> dict:
        """A Prometheus API call's reply, `status` and `warnings` and all."""
        return self.session.get(self.url + path, params=params, timeout=30).json()

    def query(self, expr: str, **params) -> list:
        """The result of an instant query that succeeded with no warning: a partial answer
        (a store that did not answer) fails."""
        reply = self.api("/api/v1/query", query=expr, **params)
        assert reply.get("status") == "success" and not reply.get("warnings"), f"{expr}: {reply}"
        return reply["data"]["result"]


class Ruler(_Component):
    """Ruler evaluating rule files through Query's HTTP API, keeping its records and ALERTS in
    its own TSDB and serving them over the StoreAPI. `labels` are its external labels: they
    are set on every series it serves, over the series' own."""

    def __init__(self, workdir, binary, query_url, rule_files, labels, interval="2s", name="rule"):
        super().__init__(workdir, binary, name)
        self.query_url = query_url
        self.rule_files = list(rule_files)
        self.labels = dict(labels)
        self.interval = interval

    def _args(self) -> list[str]:
        return [
            "rule",
            f"--data-dir={self.workdir / (self.name + '-data')}",
            *(f"--rule-file={path}" for path in self.rule_files),
            f"--query={self.query_url}",
            f"--eval-interval={self.interval}",
            *(f'--label={k}="{v}"' for k, v in self.labels.items()),
        ]

    def groups(self) -> list[dict]:
        reply = self.session.get(self.url + "/api/v1/rules", timeout=10).json()
        return reply["data"]["groups"]

    def evaluations(self) -> dict[str, float]:
        """{rule group: evaluations so far}, from its own /metrics."""
        runs = self.metric("prometheus_rule_group_iterations_total")
        return {re.search(r'rule_group="([^"]*)"', k).group(1): v for k, v in runs.items()}

    def wait_for_evaluations(self, n: int, timeout: float = 60.0) -> None:
        """Until every rule group has been evaluated `n` more times than now."""
        start = self.evaluations()
        if not start:
            raise AssertionError("thanos rule has no rule groups loaded")
        deadline = time.monotonic() + timeout
        while any(runs < start.get(g, 0) + n for g, runs in self.evaluations().items()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"rule groups not evaluated {n} more times in {timeout}s")
            time.sleep(0.3)
