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

import time

import yaml

from .ports import free_port
from .prometheus import ApiServer


class _Component(ApiServer):
    def __init__(self, workdir, binary, name):
        super().__init__(workdir, binary, name)
        self.grpc_port = free_port()
        self.grpc = f"127.0.0.1:{self.grpc_port}"

    def _args(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout=60.0):
        return self._launch(
            [
                self.binary,
                *self._args(),
                f"--http-address=127.0.0.1:{self.port}",
                f"--grpc-address=127.0.0.1:{self.grpc_port}",
                "--log.level=info",
            ],
            timeout,
        )


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
