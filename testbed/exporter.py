"""The exporter itself as a child process, listening on a free loopback port: the one place
tests, benches and the demo spell out its command line.

exporter = start_exporter(["--collector.disable-defaults"], log_dir)
requests.get(exporter.url + "/metrics")
exporter.proc.stop()
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from testbed.procs import Proc, start_on_free_port

REPO = Path(__file__).resolve().parents[1]
MODULE = "kube_scale_exporter"


def exporter_argv(port: int, flags: Sequence[str] = (), module: str = MODULE) -> list[str]:
    """`python -m kube_scale_exporter FLAGS... --web.listen-address 127.0.0.1:PORT`: the
    address last, so that it wins over one in `flags` (a manifest's args). `module` for a
    wrapper that runs the exporter with something changed (tests.neighbor.no_netlink)."""
    return [sys.executable, "-m", module, *flags, "--web.listen-address", f"127.0.0.1:{port}"]


class Exporter:
    """A started exporter: its process, port and URL."""

    def __init__(self, proc: Proc, port: int, scheme: str = "http"):
        self.proc = proc
        self.port = port
        self.url = f"{scheme}://127.0.0.1:{port}"


def start_exporter(
    flags: Sequence[str],
    log_dir,
    *,
    scheme: str = "http",
    module: str = MODULE,
    prefix: Sequence[str] = (),
    cwd=REPO,
    env: dict | None = None,
    timeout: float = 30.0,
) -> Exporter:
    """Start the exporter with `flags` on a free port and wait until it listens; its log is
    LOG_DIR/exporter-PORT.log. `prefix` runs it under another command (prlimit, `ip netns
    exec`); it must exec the exporter in place, so that the PID is the exporter's. A
    process that exits or does not listen in `timeout` seconds is stopped and raises; one
    whose port was taken meanwhile is started again on another."""

    def start(port: int) -> Proc:
        argv = [*prefix, *exporter_argv(port, flags, module)]
        return Proc(argv, os.path.join(str(log_dir), f"exporter-{port}.log"), env=env, cwd=cwd)

    proc, port = start_on_free_port(start, timeout=timeout)
    return Exporter(proc, port, scheme)
