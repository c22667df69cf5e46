"""A real Prometheus, of each release the tests run (3.13 and 3.16), scrapes the exporter
over mutual TLS with basic auth."""

import time

import pytest
import requests

from testbed import prometheus
from testbed.prometheus import PrometheusServer

pytestmark = pytest.mark.integration


def scrape_job(name, port, pki, username, password):
    cert, key = pki.client
    return {
        "job_name": name,
        "scheme": "https",
        "tls_config": {"ca_file": pki.ca, "cert_file": cert, "key_file": key},
        "basic_auth": {"username": username, "password": password},
        "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
    }


def api(session, base, path, **params):
    r = session.get(base + path, params=params, timeout=5)
    r.raise_for_status()
    return r.json()["data"]


@pytest.mark.parametrize("release", prometheus.RELEASES, ids=lambda r: f"prometheus-{r}")
def test_prometheus_scrapes_over_mtls_with_basic_auth(
    release, pki, password, start_exporter, tmp_path
):
    cert, key = pki.server
    exp = start_exporter(
        f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca}\n"
        f"basic_auth_users:\n  prometheus: '{password[1]}'\n"
    )
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            scrape_job("secured", exp.port, pki, "prometheus", password[0]),
            scrape_job("wrong-password", exp.port, pki, "prometheus", "guess"),
        ],
    }
    with PrometheusServer(
        tmp_path, config, binary=prometheus.binary(release, "prometheus")
    ) as prom:
        base, s = prom.url, prom.session
        up = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(up) < 2:
            try:
                result = api(s, base, "/api/v1/query", query="up")["result"]
            except requests.RequestException:
                result = []
            up = {r["metric"]["job"]: r["value"][1] for r in result}
            time.sleep(0.3)
        assert up == {"secured": "1", "wrong-password": "0"}, prom.proc.log_tail()
        targets = {t["labels"]["job"]: t for t in api(s, base, "/api/v1/targets")["activeTargets"]}
        assert targets["secured"]["health"] == "up"
        assert "401" in targets["wrong-password"]["lastError"]
        info = api(s, base, "/api/v1/query", query="kubescale_build_info")["result"]
        assert [r["metric"]["job"] for r in info] == ["secured"]
