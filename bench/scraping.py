"""CPU per scrape: a server under sequential scrapes over one kept-alive connection, its
CPU (user + system, from /proc/PID/stat) over them, as every scrape-cost bench measures it.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import requests

from testbed.procs import cpu_seconds, rss_mib


@dataclass
class Run:
    """One server under `scrapes` sequential scrapes over one kept-alive connection."""

    scrapes: int
    cpu_s: float  # the server's user + system CPU over the scrapes
    wall_p50_ms: float
    rss_first: float  # MiB after the first scrape
    rss_last: float  # MiB after the last
    peak: float
    samples: int  # lines of the last answer that are samples

    @property
    def cpu_ms_per_scrape(self) -> float:
        return self.cpu_s * 1000 / self.scrapes


def scrape_process(pid: int, url: str, scrapes: int, headers: dict | None = None) -> Run:
    walls = []
    with requests.Session() as session:
        session.headers.update(headers or {})
        text = session.get(url, timeout=60).text
        first = rss_mib(pid)[0]
        cpu = cpu_seconds(pid)
        for _ in range(scrapes):
            started = time.perf_counter()
            reply = session.get(url, timeout=60)
            walls.append(time.perf_counter() - started)
            reply.raise_for_status()
            text = reply.text
        used = cpu_seconds(pid) - cpu
    rss, peak = rss_mib(pid)
    samples = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    return Run(scrapes, used, statistics.median(walls) * 1000, first, rss, peak, samples)
