"""The demo's Prometheus configuration is one Prometheus accepts, with the mixin's job names.

Running the whole demo takes about two minutes (an alert's `for: 1m` included), so the
suite checks what it hands to Prometheus; `make demo` is the end-to-end run.
"""

import json
import subprocess

import pytest

from tools import demo

pytestmark = pytest.mark.integration


def test_demo_prometheus_config_is_valid_and_matches_the_mixin(promtool, mixin, tmp_path):

    config = demo.prometheus_config(9001, 9002, 9003)
    path = tmp_path / "prometheus.yml"
    path.write_text(json.dumps(config))
    out = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    c = mixin["config"]
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    for selector in (
        c["nodeExporterSelector"],
        c["clusterExporterSelector"],
        c["prometheusSelector"],
    ):
        assert any(selector == f'job="{job}"' for job in jobs), selector
    (node_job,) = [j for j in config["scrape_configs"] if j["job_name"] == demo.NODE_JOB]
    assert c["nodeLabel"] in node_job["static_configs"][0]["labels"]
