"""Prometheus on a free loopback port, for tests and the demo: the newest release the tests
run by default, or any release's binary (`binary=`, e.g. `binary("3.13", "prometheus")`).

    with PrometheusServer(workdir, {"scrape_configs": [...]}) as prom:
        prom.query('up{job="x"}')            # the instant query's result list

The config is a dict (written as JSON, which is YAML); rule files and extra flags may be
given. `start` returns once /-/ready answers, i.e. the TSDB is loaded. ApiServer is what it
shares with the other servers of its API (testbed/thanos.py, testbed/victoriametrics.py).
"""

import json
import re
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


class ApiServer:
    """A server of the Prometheus HTTP API (Prometheus, a Thanos component, VictoriaMetrics,
    vmalert) run from `binary` on a free loopback port, its log `name`.log in `workdir`:
    `_launch` returns once `ready_path` answers, `stop` ends it by PID."""

    ready_path = "/-/ready"

    def __init__(self, workdir, binary, name):
        self.workdir = workdir
        self.binary = binary
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.session = requests.Session()
        self.session.trust_env = False  # this machine's proxy/CA variables are not for loopback
        self.proc = None

    def _launch(self, argv, timeout):
        self.proc = Proc(argv, self.workdir / f"{self.name}.log")
        wait_for_port(self.port, proc=self.proc, timeout=timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.session.get(self.url + self.ready_path, timeout=2).ok:
                    return self
            except requests.RequestException:
                pass
            if not self.proc.alive():
                break
            time.sleep(0.2)
        raise TimeoutError(f"{self.name} not ready:\n{self.proc.log_tail()}")

    def metric(self, name: str) -> dict[str, float]:
        """{label text: value} of one of its own /metrics series."""
        text = self.session.get(self.url + "/metrics", timeout=5).text
        pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", re.M)
        return {labels or "": float(value) for labels, value in pattern.findall(text)}

    # Where it evaluates rules: its own counter of each rule group's evaluations, and the
    # counter's group label.
    iterations = ("prometheus_rule_group_iterations_total", "rule_group")

    def groups(self) -> list[dict]:
        reply = self.session.get(self.url + "/api/v1/rules", timeout=10).json()
        return reply["data"]["groups"]

    def evaluations(self) -> dict[str, float]:
        """{rule group: evaluations so far}, from its own /metrics."""
        metric, label = self.iterations
        return {
            re.search(rf'{label}="([^"]*)"', k).group(1): v for k, v in self.metric(metric).items()
        }

    def wait_for_evaluations(self, n: int, timeout: float = 60.0) -> None:
        """Until every rule group has been evaluated `n` more times than now."""
        start = self.evaluations()
        if not start:
            raise AssertionError(f"{self.name} has no rule groups loaded")
        deadline = time.monotonic() + timeout
        while any(runs < start.get(g, 0) + n for g, runs in self.evaluations().items()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"rule groups not evaluated {n} more times in {timeout}s")
            time.sleep(0.3)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class PrometheusServer(ApiServer):
    def __init__(self, workdir, config: dict, extra_args=(), binary=None):
        super().__init__(workdir, binary or newest("prometheus"), "prometheus")
        self.config = config
        self.extra_args = list(extra_args)

    def start(self, timeout=60.0) -> "PrometheusServer":
        config = self.workdir / "prometheus.yml"
        config.write_text(json.dumps(self.config, indent=2))
        return self._launch(
            [
                self.binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                *self.extra_args,
            ],
            timeout,
        )

    def query(self, expr: str) -> list:
        reply = self.session.get(
            self.url + "/api/v1/query", params={"query": expr}, timeout=5
        ).json()
        return reply["data"]["result"] if reply.get("status") == "success" else []
