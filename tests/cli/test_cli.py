"""The command line as users run it: a real process, its flags, exit codes and signals."""

import signal
import subprocess
import sys
import time

import pytest
import requests

from kube_scale_exporter.collectors import COLLECTORS
from testbed.exporter import MODULE, REPO, start_exporter
from testbed.metrics import parse_exposition

pytestmark = pytest.mark.integration

EXPORTER = [sys.executable, "-m", MODULE]


def run(*flags):
    return subprocess.run(
        EXPORTER + list(flags), cwd=REPO, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--bogus"], "--bogus"),
        (["--web.listen-address", "nonsense"], "--web.listen-address"),
        (["--web.listen-address", ":99999"], "--web.listen-address"),
        (["--web.telemetry-path", "metrics"], "--web.telemetry-path"),
        (["--web.max-requests", "-1"], "--web.max-requests"),
        (["--web.idle-timeout", "0"], "--web.idle-timeout"),
        (["--web.idle-timeout", "-5s"], "--web.idle-timeout"),
        (["--web.idle-timeout", "forever"], "--web.idle-timeout"),
        (["--web.max-connections", "0"], "--web.max-connections"),
        (["--web.max-connections", "-1"], "--web.max-connections"),
        (["--web.max-connections", "1e3"], "--web.max-connections"),
        (["--scrape.timeout", "0"], "--scrape.timeout"),
        (["--scrape.timeout", "soon"], "--scrape.timeout"),
        (["--path.procfs", "/no/such/dir"], "--path.procfs"),
        (["--path.sysfs", "/no/such/dir"], "--path.sysfs"),
        (["--log.level", "loud"], "--log.level"),
        (["--mode", "edge"], "--mode"),
        (["--balloon.max-cached-objects", "0"], "--balloon.max-cached-objects"),
        (["--balloon.max-cached-objects", "lots"], "--balloon.max-cached-objects"),
        (["--image-pull.max-cached-events", "-1"], "--image-pull.max-cached-events"),
        (["--image-pull.max-cached-events", "1e5"], "--image-pull.max-cached-events"),
        (["--collector.no-such-thing"], "--collector.no-such-thing"),
        (["check", "--web.listen-address", "x"], "--web.listen-address"),
        (["--mode", "cluster", "--collector.neighbor"], "--collector.neighbor"),
        (["--mode", "node", "--balloon.selector", "run=overprovisioning"], "--collector.balloon"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(flags, named):
    result = run(*flags)
    assert result.returncode == 2, result.stderr
    assert named in result.stderr.splitlines()[-1], result.stderr


def test_help_lists_every_collector_flag():
    text = run("--help").stdout
    for cls in COLLECTORS:
        assert f"--collector.{cls.name}" in text and f"--no-collector.{cls.name}" in text


def test_port_in_use_exits_2_naming_the_flag(tmp_path):
    first = start_exporter([], tmp_path)
    try:
        second = run("--web.listen-address", f"127.0.0.1:{first.port}")
        assert second.returncode == 2
        assert "--web.listen-address" in second.stderr
    finally:
        first.proc.stop()


def test_serves_then_stops_gracefully_on_sigterm(tmp_path):
    exporter = start_exporter(["--web.telemetry-path", "/m", "--web.process-metrics"], tmp_path)
    proc = exporter.proc
    try:
        families = parse_exposition(requests.get(exporter.url + "/m", timeout=10).text)
        names = {f.name for f in families}
        assert "kubescale_build_info" in names
        assert "process_resident_memory_bytes" in names, "--web.process-metrics adds them"
        start = time.monotonic()
        proc.popen.send_signal(signal.SIGTERM)
        assert proc.popen.wait(timeout=5) == 0
        assert time.monotonic() - start < 5
        assert "shutting down" in proc.log_tail()
    finally:
        proc.stop()
