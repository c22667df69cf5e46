"""The exporter's own process: process_* from /proc/self, python_gc_* and python_info.

The names, HELP, types and values are the ones prometheus_client's process, GC and
platform collectors give, so dashboards and alerts on them keep working (--no-process-metrics
turns them off). Without a readable /proc there are no process_* series, as before.
"""

from __future__ import annotations

import gc
import os
import sys

from kube_scale_exporter import PYTHON_VERSION
from kube_scale_exporter.metrics import CounterFamily, Family, GaugeFamily

PROC = "/proc"
# sys.implementation.name as python_info spells it (platform.python_implementation()).
IMPLEMENTATIONS = {"cpython": "CPython", "pypy": "PyPy"}


def _boot_time(proc: str) -> float | None:
    try:
        with open(os.path.join(proc, "stat"), "rb") as stat:
            for line in stat:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


def _python_info() -> GaugeFamily:
    major, minor, patchlevel = (PYTHON_VERSION.split(".") + ["0"])[:3]
    info = GaugeFamily(
        "python_info",
        "Python platform information",
        labels=["version", "implementation", "major", "minor", "patchlevel"],
    )
    implementation = IMPLEMENTATIONS.get(sys.implementation.name, sys.implementation.name)
    info.add_metric([PYTHON_VERSION, implementation, major, minor, patchlevel], 1)
    return info


class ProcessMetrics:
    """Reads its families at each scrape; what never changes is read once."""

    def __init__(self, proc: str = PROC):
        self._self = os.path.join(proc, "self")
        self._boot_time = _boot_time(proc)
        self._ticks = os.sysconf("SC_CLK_TCK")
        self._page_size = os.sysconf("SC_PAGE_SIZE")
        self._python_info = _python_info()

    def families(self) -> list[Family]:
        return [*self._process(), self._python_info, *_gc()]

    def _process(self) -> list[Family]:
        if not self._boot_time:
            return []
        out: list[Family] = []
        try:
            with open(os.path.join(self._self, "stat"), "rb") as stat:
                # After the command name, which may hold spaces and parentheses itself.
                fields = stat.read().split(b")")[-1].split()
            out += [
                GaugeFamily(
                    "process_virtual_memory_bytes",
                    "Virtual memory size in bytes.",
                    value=float(fields[20]),
                ),
                GaugeFamily(
                    "process_resident_memory_bytes",
                    "Resident memory size in bytes.",
                    value=float(fields[21]) * self._page_size,
                ),
                GaugeFamily(
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    value=float(fields[19]) / self._ticks + self._boot_time,
                ),
                CounterFamily(
                    "process_cpu_seconds_total",
                    "Total user and system CPU time spent in seconds.",
                    value=float(fields[11]) / self._ticks + float(fields[12]) / self._ticks,
                ),
            ]
        except OSError:
            pass
        try:
            out += [
                GaugeFamily(
                    "process_open_fds",
                    "Number of open file descriptors.",
                    value=len(os.listdir(os.path.join(self._self, "fd"))),
                ),
                GaugeFamily(
                    "process_max_fds",
                    "Maximum number of open file descriptors.",
                    value=self._max_fds(),
                ),
            ]
        except OSError:
            pass
        return out

    def _max_fds(self) -> float:
        with open(os.path.join(self._self, "limits"), "rb") as limits:
            for line in limits:
                if line.startswith(b"Max open file"):
                    return float(line.split()[3])
        raise OSError("no 'Max open files' in limits")


def _gc() -> list[Family]:
    collected = CounterFamily(
        "python_gc_objects_collected", "Objects collected during gc", labels=["generation"]
    )
    uncollectable = CounterFamily(
        "python_gc_objects_uncollectable",
        "Uncollectable objects found during GC",
        labels=["generation"],
    )
    collections = CounterFamily(
        "python_gc_collections",
        "Number of times this generation was collected",
        labels=["generation"],
    )
    for generation, stats in enumerate(gc.get_stats()):
        collected.add_metric([str(generation)], stats["collected"])
        uncollectable.add_metric([str(generation)], stats["uncollectable"])
        collections.add_metric([str(generation)], stats["collections"])
    return [collected, uncollectable, collections]
