"""A real exporter process under test, scraped over HTTP the way Prometheus does.

exporter = RunningExporter(["--mode", "node", ...], log_dir).start()
scrape = exporter.scrape(timeout=3)       # Scrape: status, seconds, success per collector
exporter.wait_for(lambda s: s.success["etcd"] == 0, within=5)
exporter.terminate()                      # SIGTERM; returns (exit status, seconds)
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field

import requests

from testbed.exporter import MODULE, REPO, exporter_argv
from testbed.metrics import parse_exposition
from testbed.procs import Proc, start_on_free_port


@dataclass
class Scrape:
    status: int
    seconds: float
    text: str
    success: dict[str, float] = field(default_factory=dict)
    samples: list = field(default_factory=list)

    def value(self, name: str, **labels) -> float | None:
        for s in self.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
        return None


class RunningExporter:
    def __init__(self, flags: list[str], log_dir, module: str = MODULE):
        self.flags, self.module, self.log_dir = flags, module, str(log_dir)
        self.proc: Proc | None = None
        self.session = requests.Session()
        self.session.trust_env = False

    def start(self) -> RunningExporter:
        def start(port: int) -> Proc:
            self.port = port
            self.url = f"http://127.0.0.1:{port}"
            self.log_path = os.path.join(self.log_dir, f"exporter-{port}.log")
            return Proc(exporter_argv(port, self.flags, self.module), self.log_path, cwd=str(REPO))

        self.proc, _ = start_on_free_port(start)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def scrape(self, timeout: float = 3.0) -> Scrape:
        """One scrape with Prometheus' timeout header; HTTP waits a little longer."""
        start = time.monotonic()
        reply = self.session.get(
            self.url + "/metrics",
            timeout=timeout + 5,
            headers={"X-Prometheus-Scrape-Timeout-Seconds": str(timeout)},
        )
        took = time.monotonic() - start
        out = Scrape(reply.status_code, took, reply.text)
        if reply.status_code == 200:
            for family in parse_exposition(reply.text):
                out.samples.extend(family.samples)
            out.success = {
                s.labels["collector"]: s.value
                for s in out.samples
                if s.name == "kubescale_scrape_collector_success"
            }
        return out

    def wait_for(self, predicate, within: float, timeout: float = 3.0) -> Scrape:
        """Scrape until predicate(scrape) holds; every scrape on the way must answer 200
        within its timeout and the process must stay up. Returns the scrape that held."""
        deadline = time.monotonic() + within
        seen = None
        while True:
            assert self.alive(), f"exporter exited:\n{self.proc.log_tail()}"
            seen = self.scrape(timeout)
            assert seen.status == 200, seen.text[:300]
            assert seen.seconds < timeout + 0.5, f"scrape took {seen.seconds:.2f}s"
            if predicate(seen):
                return seen
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"not within {within}s; last success {seen.success}\n{self.proc.log_tail()}"
                )
            time.sleep(0.2)

    def terminate(self, timeout: float = 30.0) -> tuple[int, float]:
        """SIGTERM; (exit status, seconds until the process was gone)."""
        start = time.monotonic()
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            code = self.proc.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - start
        self.stop()
        return code, took

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
        self.session.close()
