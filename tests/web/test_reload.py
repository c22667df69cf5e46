"""The exporter follows its web config on disk: renewed certificates and changed users
apply to the next connection, and a broken file closes the door until it is fixed."""

import os
import shutil
import time

import bcrypt
import pytest
import requests

pytestmark = pytest.mark.integration


def get(url, **kw):
    """One request on a new connection (a kept-alive one keeps its old settings)."""
    with requests.Session() as s:
        s.trust_env = False
        return s.get(url, timeout=10, **kw)


def eventually(check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return True
        except (requests.RequestException, OSError):
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def replace_file(path, source):
    """As a Secret volume update does: the new file arrives whole, under a new inode."""
    tmp = f"{path}.new"
    shutil.copy(source, tmp)
    os.replace(tmp, path)


@pytest.fixture
def served(pki, tmp_path):
    """Certificate and key copied where the test may replace them, and a config naming them."""
    cert, key = pki.server
    shutil.copy(cert, tmp_path / "tls.crt")
    shutil.copy(key, tmp_path / "tls.key")
    return tmp_path


def test_a_renewed_certificate_is_served_without_a_restart(pki, served, start_exporter):
    exp = start_exporter(
        config_path=served / "web.yml",
        config_text="tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n",
    )
    assert get(exp.url + "/healthz", verify=pki.ca).ok
    cert, key = pki.leaf("renewed", "rogue-ca", "subjectAltName=IP:127.0.0.1")
    replace_file(served / "tls.key", key)
    replace_file(served / "tls.crt", cert)
    assert eventually(lambda: get(exp.url + "/healthz", verify=pki.rogue_ca).ok), (
        exp.proc.log_tail()
    )
    with pytest.raises(requests.exceptions.SSLError):
        get(exp.url + "/healthz", verify=pki.ca)
    assert exp.proc.alive()


def test_a_changed_password_applies_to_the_next_request(pki, password, served, start_exporter):
    tls = "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"
    config = served / "web.yml"
    exp = start_exporter(
        config_path=config, config_text=tls + f"basic_auth_users:\n  prometheus: '{password[1]}'\n"
    )
    old = ("prometheus", password[0])
    kept_alive = requests.Session()  # as Prometheus: one connection, reused
    kept_alive.trust_env = False
    assert kept_alive.get(exp.url + "/metrics", auth=old, verify=pki.ca, timeout=10).ok
    new_hash = bcrypt.hashpw(b"rotated", bcrypt.gensalt(4)).decode()
    (served / "next.yml").write_text(tls + f"basic_auth_users:\n  prometheus: '{new_hash}'\n")
    replace_file(config, served / "next.yml")
    assert eventually(lambda: get(exp.url + "/metrics", auth=old, verify=pki.ca).status_code == 401)
    # the revoked password stops working on the kept-alive connection too
    assert (
        kept_alive.get(exp.url + "/metrics", auth=old, verify=pki.ca, timeout=10).status_code == 401
    )
    assert get(exp.url + "/metrics", auth=("prometheus", "rotated"), verify=pki.ca).ok


def test_a_broken_file_refuses_connections_until_it_is_fixed(pki, served, start_exporter):
    good = "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"
    config = served / "web.yml"
    exp = start_exporter(config_path=config, config_text=good)
    assert get(exp.url + "/healthz", verify=pki.ca).ok
    (served / "bad.yml").write_text(good + "  client_ca: typo.crt\n")
    replace_file(config, served / "bad.yml")

    def refused():
        try:
            get(exp.url + "/healthz", verify=pki.ca)
        except requests.ConnectionError:
            return True
        return False

    assert eventually(refused)
    assert f"{config}:4: unknown key 'client_ca'" in exp.proc.log_tail()
    (served / "good.yml").write_text(good)
    replace_file(config, served / "good.yml")
    assert eventually(lambda: get(exp.url + "/healthz", verify=pki.ca).ok)
    assert exp.proc.alive()
