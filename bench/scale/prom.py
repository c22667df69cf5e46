"""A real Prometheus on a free loopback port, and the few API calls we need.

Which Prometheus: `use(path)` (bench.scale's --prometheus), else the newest release the tests
run (3.16, .ci/setup.d/15-prometheus.sh); promtool is the one beside it, so a release's server
and backfiller always match.

Started by argv with its own config, stopped by PID (testbed/procs.py). Queries ask
for `stats=all`; the server runs with --enable-feature=promql-per-step-stats so a range
query's stats carry samples per step too.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import requests
import yaml

from testbed import prometheus as testbed_prometheus
from testbed.ports import free_port
from testbed.procs import Proc, wait_for_port

SCRAPE_INTERVAL = 30
_chosen: str | None = None


def use(prometheus: str) -> None:
    """Run this Prometheus binary (and the promtool in its directory) from now on."""
    global _chosen
    _chosen = prometheus


def binaries() -> tuple[str, str]:
    """(prometheus, promtool): the chosen binary or the newest release's, and the promtool
    beside it."""
    prometheus = _chosen or testbed_prometheus.newest("prometheus")
    if shutil.which(prometheus) is None:
        raise FileNotFoundError(f"{prometheus} missing: pass --prometheus PATH")
    promtool = str(Path(prometheus).resolve().parent / "promtool")
    if shutil.which(promtool) is None:
        raise FileNotFoundError(f"{promtool} missing: promtool must sit beside {prometheus}")
    return prometheus, promtool


def version() -> str:
    """The first line of the chosen server's --version."""
    out = subprocess.run([binaries()[0], "--version"], capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).split("\n")[0]


@dataclass
class Result:
    """One query's answer and what it cost."""

    series: int
    samples: int  # stats.samples.totalQueryableSamples
    peak: int  # stats.samples.peakSamples
    wall: float  # seconds, measured around the HTTP call
    engine: float  # stats.timings.evalTotalTime
    max_step_samples: int  # the most samples any one step touched (per-step stats)
    error: str | None = None


class Prometheus:
    """One server on `data_dir`; `scrape_configs` are added after its own self-scrape."""

    def __init__(
        self,
        workdir: Path,
        data_dir: Path,
        rule_files=(),
        scrape_configs=(),
        retention: str = "3650d",
        extra_flags=(),
    ):
        prometheus, _ = binaries()
        self.workdir = Path(workdir)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.rule_files = [str(Path(f).resolve()) for f in rule_files]
        self.config_path = self.workdir / f"prometheus-{self.port}.yml"
        self.write_config(scrape_configs)
        self.argv = [
            prometheus,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={data_dir}",
            f"--storage.tsdb.retention.time={retention}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--enable-feature=promql-per-step-stats",
            "--web.enable-admin-api",
            *extra_flags,
        ]
        self.proc: Proc | None = None
        # One kept-alive connection for the queries: a rule evaluation inside Prometheus
        # opens none, so a connection per query would add its setup to every group's CPU.
        self.session = requests.Session()

    def write_config(self, scrape_configs=()) -> None:
        config = {
            "global": {
                "scrape_interval": f"{SCRAPE_INTERVAL}s",
                "evaluation_interval": f"{SCRAPE_INTERVAL}s",
                "scrape_timeout": "25s",
            },
            "rule_files": self.rule_files,
            "scrape_configs": [
                {
                    "job_name": "prometheus",
                    "static_configs": [{"targets": [f"127.0.0.1:{self.port}"]}],
                },
                *scrape_configs,
            ],
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def reload(self, scrape_configs) -> None:
        """New scrape configs, applied by SIGHUP as an operator would."""
        self.write_config(scrape_configs)
        before = self.metric("prometheus_config_last_reload_success_timestamp_seconds")
        os.kill(self.pid, signal.SIGHUP)
        deadline = time.monotonic() + 120
        while self.metric("prometheus_config_last_reload_success_timestamp_seconds") == before:
            if time.monotonic() > deadline:
                raise TimeoutError(f"config reload not applied:\n{self.proc.log_tail()}")
            time.sleep(0.5)

    def start(self, timeout: float = 120.0) -> Prometheus:
        self.proc = Proc(self.argv, self.workdir / f"prometheus-{self.port}.log")
        wait_for_port(self.port, proc=self.proc, timeout=timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{self.url}/-/ready", timeout=5).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            if not self.proc.alive():
                raise RuntimeError(f"prometheus exited:\n{self.proc.log_tail()}")
            time.sleep(0.2)
        raise TimeoutError(f"prometheus not ready after {timeout}s:\n{self.proc.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(timeout=60)
            self.session.close()
            self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_bytes(self) -> int:
        """Resident memory of the server process, from the kernel."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def cpu_seconds(self) -> float:
        """CPU time the server process has used (user + system), from the kernel."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def metric(self, name: str) -> float:
        """One of the server's own metrics, read from its /metrics (no query cost)."""
        text = requests.get(f"{self.url}/metrics", timeout=30).text
        total, found = 0.0, False
        for line in text.splitlines():
            if line.startswith((name + " ", name + "{")):
                total += float(line.rsplit(" ", 1)[1])
                found = True
        if not found:
            raise KeyError(name)
        return total

    def _call(self, path: str, params: dict) -> tuple[dict, float]:
        start = time.monotonic()
        resp = self.session.post(f"{self.url}{path}", data=params, timeout=600)
        wall = time.monotonic() - start
        body = resp.json()
        return body, wall

    def query(self, expr: str, at: float) -> Result:
        return self._result(
            *self._call("/api/v1/query", {"query": expr, "time": at, "stats": "all"})
        )

    def query_range(self, expr: str, start: float, end: float, step: float) -> Result:
        params = {"query": expr, "start": start, "end": end, "step": step, "stats": "all"}
        return self._result(*self._call("/api/v1/query_range", params))

    @staticmethod
    def _result(body: dict, wall: float) -> Result:
        if body.get("status") != "success":
            return Result(
                0, 0, 0, wall, 0.0, 0, error=f"{body.get('errorType')}: {body.get('error')}"
            )
        data = body["data"]
        stats = data.get("stats", {})
        samples = stats.get("samples", {})
        per_step = samples.get("totalQueryableSamplesPerStep") or []
        result = data["result"]
        series = len(result) if isinstance(result, list) else 1
        return Result(
            series=series,
            samples=int(samples.get("totalQueryableSamples", 0)),
            peak=int(samples.get("peakSamples", 0)),
            wall=wall,
            engine=float(stats.get("timings", {}).get("evalTotalTime", 0.0)),
            max_step_samples=max((int(v) for _, v in per_step), default=0),
        )

    def scalar(self, expr: str, at: float | None = None) -> float:
        """The first value an instant query returns (0 when empty); for our own bookkeeping."""
        params = {"query": expr} if at is None else {"query": expr, "time": at}
        body = requests.get(f"{self.url}/api/v1/query", params=params, timeout=120).json()
        result = body["data"]["result"]
        return float(result[0]["value"][1]) if result else 0.0

    def label_values(self, label: str, match: str) -> list[str]:
        resp = requests.get(
            f"{self.url}/api/v1/label/{label}/values", params={"match[]": match}, timeout=120
        )
        return resp.json().get("data", [])

    def rule_groups(self) -> list[dict]:
        return requests.get(f"{self.url}/api/v1/rules", timeout=60).json()["data"]["groups"]
