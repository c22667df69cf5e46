"""VictoriaMetrics single-node and vmalert on free loopback ports, for the mixin's tests past
one Prometheus (binaries from .ci/setup.d/17-victoria-metrics-sid.sh).

    with VictoriaMetrics(workdir, binary) as vm:
        vm.query('up')                                   # the instant query's result list
        with Vmalert(workdir, vmalert_binary, vm.url, rule_files) as vmalert:
            vmalert.wait_for_evaluations(2)

Both answer the Prometheus HTTP API; VictoriaMetrics also takes Prometheus' remote write at
/api/v1/write. Query latency offsets are cut to a second: a test reads what it just wrote.
"""

from __future__ import annotations


from .prometheus import ApiServer

# How far behind "now" both look: VictoriaMetrics hides the newest samples for this long
# (its default 30 s lets samples of one scrape settle), vmalert evaluates this far back.
LATENCY = "1s"


class _Server(ApiServer):
    ready_path = "/health"

    def _start(self, args, timeout):
        return self._launch([self.binary, f"-httpListenAddr=127.0.0.1:{self.port}", *args], timeout)


class VictoriaMetrics(_Server):
    def __init__(self, workdir, binary):
        super().__init__(workdir, binary, "victoria-metrics")

    def start(self, timeout=60.0) -> VictoriaMetrics:
        return self._start(
            [
                f"-storageDataPath={self.workdir / 'victoria-metrics-data'}",
                "-retentionPeriod=1d",
                f"-search.latencyOffset={LATENCY}",
                # Caches would hide samples written after a query of the same range.
                "-search.disableCache",
            ],
            timeout,
        )

    @property
    def remote_write_url(self) -> str:
        return self.url + "/api/v1/write"

    def api(self, path: str, **params) -> dict:
        """A Prometheus API call's reply, `status` and all (errors are the caller's to judge)."""
        return self.session.get(self.url + path, params=params, timeout=30).json()

    def query(self, expr: str) -> list:
        reply = self.api("/api/v1/query", query=expr)
        assert reply.get("status") == "success", f"{expr}: {reply}"
        return reply["data"]["result"]

    def flush(self) -> None:
        """Make everything received so far searchable (a test-only endpoint of single-node)."""
        self.session.get(self.url + "/internal/force_flush", timeout=10).raise_for_status()


class Vmalert(_Server):
    iterations = ("vmalert_iteration_total", "group")

    def __init__(self, workdir, binary, datasource_url, rule_files, interval="2s"):
        super().__init__(workdir, binary, "vmalert")
        self.datasource_url = datasource_url
        self.rule_files = list(rule_files)
        self.interval = interval

    def start(self, timeout=60.0) -> Vmalert:
        return self._start(
            [
                *(f"-rule={path}" for path in self.rule_files),
                f"-datasource.url={self.datasource_url}",
                # Recording rules' results and ALERTS go back to the store, as in production.
                f"-remoteWrite.url={self.datasource_url}",
                "-remoteWrite.flushInterval=1s",
                f"-remoteRead.url={self.datasource_url}",
                "-notifier.blackhole",
                f"-evaluationInterval={self.interval}",
                f"-rule.evalDelay={LATENCY}",
            ],
            timeout,
        )
