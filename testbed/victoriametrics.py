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

import re
import time

import requests

from .ports import free_port
from .procs import Proc, wait_for_port

# How far behind "now" both look: VictoriaMetrics hides the newest samples for this long
# (its default 30 s lets samples of one scrape settle), vmalert evaluates this far back.
LATENCY = "1s"


class _Server:
    def __init__(self, workdir, binary, name):
        self.workdir = workdir
        self.binary = binary
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.session = requests.Session()
        self.session.trust_env = False  # this machine's proxy/CA variables are not for loopback
        self.proc = None

    def _start(self, args, ready_path, timeout):
        self.proc = Proc(
            [self.binary, f"-httpListenAddr=127.0.0.1:{self.port}", *args],
            self.workdir / f"{self.name}.log",
        )
        wait_for_port(self.port, proc=self.proc, timeout=timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.session.get(self.url + ready_path, timeout=2).ok:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{self.name} not ready:\n{self.proc.log_tail()}")

    def metric(self, name: str) -> dict[str, float]:
        """{label text: value} of one of its own /metrics series."""
        text = self.session.get(self.url + "/metrics", timeout=5).text
        pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", re.M)
        return {labels or "": float(value) for labels, value in pattern.findall(text)}

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def __exit__(self, *exc) -> None:
        self.stop()


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
            "/health",
            timeout,
        )

    def __enter__(self) -> VictoriaMetrics:
        return self.start()

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
            "/health",
            timeout,
        )

    def __enter__(self) -> Vmalert:
        return self.start()

    def groups(self) -> list[dict]:
        reply = self.session.get(self.url + "/api/v1/rules", timeout=10).json()
        return reply["data"]["groups"]

    def evaluations(self) -> dict[str, float]:
        """{rule group: evaluations so far}, from vmalert's own /metrics."""
        runs = self.metric("vmalert_iteration_total")
        return {re.search(r'group="([^"]*)"', k).group(1): v for k, v in runs.items()}

    def wait_for_evaluations(self, n: int, timeout: float = 60.0) -> None:
        """Until every rule group has been evaluated `n` more times than now."""
        start = self.evaluations()
        deadline = time.monotonic() + timeout
        while any(runs < start.get(g, 0) + n for g, runs in self.evaluations().items()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"rule groups not evaluated {n} more times in {timeout}s")
            time.sleep(0.3)
