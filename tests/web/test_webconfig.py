"""--web.config.file against the real exporter process and real HTTPS clients."""

import base64
import os
import subprocess

import bcrypt
import pytest
import requests

from kube_scale_exporter.web.config import BasicAuth

from .test_reload import eventually, replace_file


def tls_block(pki, **extra):
    cert, key = pki.server
    lines = ["tls_server_config:", f"  cert_file: {cert}", f"  key_file: {key}"]
    lines += [f"  {k}: {v}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def users_block(password):
    return f"basic_auth_users:\n  prometheus: '{password[1]}'\n"


def session():
    s = requests.Session()
    s.trust_env = False  # this machine sets REQUESTS_CA_BUNDLE, which would override verify=
    return s


def curl(*args):
    return subprocess.run(
        ["curl", "-sS", "--max-time", "10", *args], capture_output=True, text=True, timeout=20
    )


# --- TLS and basic auth with requests --------------------------------------------------


@pytest.mark.integration
def test_requests_scrapes_over_tls_with_basic_auth(pki, password, start_exporter):
    exp = start_exporter(tls_block(pki) + users_block(password))
    r = session().get(
        exp.url + "/metrics", auth=("prometheus", password[0]), verify=pki.ca, timeout=10
    )
    assert r.status_code == 200
    assert "kubescale_build_info{" in r.text


@pytest.mark.integration
def test_missing_or_wrong_credentials_get_401_with_a_challenge(pki, password, start_exporter):
    exp = start_exporter(tls_block(pki) + users_block(password))
    s = session()
    for auth in (None, ("prometheus", "wrong"), ("nobody", password[0])):
        r = s.get(exp.url + "/metrics", auth=auth, verify=pki.ca, timeout=10)
        assert r.status_code == 401, auth
        assert r.headers["WWW-Authenticate"].startswith("Basic realm=")
        assert "kubescale_" not in r.text
    assert s.get(exp.url + "/", verify=pki.ca, timeout=10).status_code == 401


@pytest.mark.integration
def test_healthz_answers_without_credentials_for_kubelet_probes(pki, password, start_exporter):
    exp = start_exporter(tls_block(pki) + users_block(password))
    r = session().get(exp.url + "/healthz", verify=pki.ca, timeout=10)
    assert (r.status_code, r.text) == (200, "ok\n")


@pytest.mark.integration
def test_basic_auth_without_tls(password, start_exporter):
    exp = start_exporter(users_block(password), scheme="http")
    s = session()
    assert s.get(exp.url + "/metrics", timeout=10).status_code == 401
    assert s.get(exp.url + "/metrics", auth=("prometheus", password[0]), timeout=10).ok


@pytest.mark.integration
def test_plain_http_to_the_tls_port_gets_no_metrics(pki, start_exporter):
    exp = start_exporter(tls_block(pki))
    with pytest.raises(requests.ConnectionError):
        session().get(f"http://127.0.0.1:{exp.port}/metrics", timeout=10)
    # the server survives the bad client
    assert session().get(exp.url + "/metrics", verify=pki.ca, timeout=10).ok


@pytest.mark.integration
def test_server_certificate_is_checked_by_the_client(pki, start_exporter):
    exp = start_exporter(tls_block(pki))
    with pytest.raises(requests.exceptions.SSLError):
        session().get(exp.url + "/metrics", verify=pki.rogue_ca, timeout=10)


@pytest.mark.integration
def test_configured_headers_are_on_every_answer(pki, password, start_exporter):
    exp = start_exporter(
        tls_block(pki)
        + users_block(password)
        + (
            "http_server_config:\n  headers:\n"
            "    Strict-Transport-Security: max-age=31536000\n"
            "    X-Content-Type-Options: nosniff\n"
        )
    )
    s = session()
    for auth, code in ((None, 401), (("prometheus", password[0]), 200)):
        r = s.get(exp.url + "/metrics", auth=auth, verify=pki.ca, timeout=10)
        assert r.status_code == code
        assert r.headers["Strict-Transport-Security"] == "max-age=31536000"
        assert r.headers["X-Content-Type-Options"] == "nosniff"


# --- mutual TLS ------------------------------------------------------------------------


@pytest.mark.integration
def test_mtls_requires_a_client_certificate_from_the_ca(pki, start_exporter):
    exp = start_exporter(
        tls_block(pki, client_auth_type="RequireAndVerifyClientCert", client_ca_file=pki.ca)
    )
    s = session()
    assert s.get(exp.url + "/metrics", verify=pki.ca, cert=pki.client, timeout=10).ok
    for cert in (None, pki.rogue_client):
        with pytest.raises((requests.exceptions.SSLError, requests.ConnectionError)):
            s.get(exp.url + "/metrics", verify=pki.ca, cert=cert, timeout=10)


@pytest.mark.integration
def test_client_allowed_sans_refuses_other_certificates_of_the_same_ca(pki, start_exporter):
    exp = start_exporter(
        tls_block(
            pki,
            client_auth_type="RequireAndVerifyClientCert",
            client_ca_file=pki.ca,
            client_allowed_sans="[prometheus.test]",
        )
    )
    s = session()
    assert s.get(exp.url + "/metrics", verify=pki.ca, cert=pki.client, timeout=10).ok
    r = s.get(exp.url + "/metrics", verify=pki.ca, cert=pki.other_client, timeout=10)
    assert r.status_code == 403


@pytest.mark.integration
def test_verify_if_given_accepts_no_certificate_but_refuses_a_foreign_one(pki, start_exporter):
    exp = start_exporter(
        tls_block(pki, client_auth_type="VerifyClientCertIfGiven", client_ca_file=pki.ca)
    )
    s = session()
    assert s.get(exp.url + "/metrics", verify=pki.ca, timeout=10).ok
    with pytest.raises((requests.exceptions.SSLError, requests.ConnectionError)):
        s.get(exp.url + "/metrics", verify=pki.ca, cert=pki.rogue_client, timeout=10)


# --- curl: TLS versions, cipher suites -------------------------------------------------


@pytest.mark.integration
def test_curl_with_basic_auth_and_mtls(pki, password, start_exporter):
    exp = start_exporter(
        tls_block(pki, client_auth_type="RequireAndVerifyClientCert", client_ca_file=pki.ca)
        + users_block(password)
    )
    cert, key = pki.client
    ok = curl(
        "--cacert",
        pki.ca,
        "--cert",
        cert,
        "--key",
        key,
        "-u",
        f"prometheus:{password[0]}",
        exp.url + "/metrics",
    )
    assert ok.returncode == 0, ok.stderr
    assert "kubescale_build_info{" in ok.stdout
    no_cert = curl("--cacert", pki.ca, "-u", f"prometheus:{password[0]}", exp.url + "/metrics")
    assert no_cert.returncode != 0 and "kubescale_" not in no_cert.stdout


@pytest.mark.integration
def test_min_version_tls13_refuses_a_tls12_client(pki, start_exporter):
    exp = start_exporter(tls_block(pki, min_version="TLS13"))
    assert curl("--cacert", pki.ca, exp.url + "/healthz").stdout == "ok\n"
    old = curl("--cacert", pki.ca, "--tls-max", "1.2", exp.url + "/healthz")
    assert old.returncode == 35, old  # CURLE_SSL_CONNECT_ERROR


@pytest.mark.integration
def test_max_version_tls12_and_cipher_suites_are_enforced(pki, start_exporter):
    exp = start_exporter(
        tls_block(pki, max_version="TLS12", cipher_suites="[TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]")
    )
    ok = curl(
        "--cacert",
        pki.ca,
        "-w",
        "%{http_code}",
        "-o",
        "/dev/null",
        "--ciphers",
        "ECDHE-RSA-AES128-GCM-SHA256",
        exp.url + "/healthz",
    )
    assert ok.stdout == "200", ok.stderr
    other = curl(
        "--cacert", pki.ca, "--ciphers", "ECDHE-RSA-AES256-GCM-SHA384", exp.url + "/healthz"
    )
    assert other.returncode == 35, other
    tls13 = curl("--cacert", pki.ca, "--tlsv1.3", exp.url + "/healthz")
    assert tls13.returncode == 35, tls13


# --- bad config files: exit 2 naming the file and the line -----------------------------

BAD_CONFIGS = {
    "unknown top-level key": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\nbasic_auth_user:\n  a: b\n",
        4,
        "unknown key 'basic_auth_user'",
    ),
    "unknown tls key": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_ca: x\n",
        4,
        "unknown key 'client_ca'",
    ),
    "bad min_version": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  min_version: TLS1.2\n",
        4,
        "'TLS1.2' is not one of",
    ),
    "missing key_file": ("\ntls_server_config:\n  cert_file: {cert}\n", 3, "key_file is required"),
    "missing cert file": (
        "tls_server_config:\n  cert_file: /nonexistent/x.crt\n  key_file: {key}\n",
        2,
        "no such file",
    ),
    "plain password": ("basic_auth_users:\n  prometheus: hunter2\n", 2, "must be a bcrypt hash"),
    "bad yaml": ("basic_auth_users:\n  prometheus: 'x\n  other: y\n", 4, "invalid YAML"),
    "ca without client auth": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_ca_file: {ca}\n",
        4,
        "client_auth_type is NoClientCert",
    ),
    "client auth without ca": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        "  client_auth_type: RequireAndVerifyClientCert\n",
        4,
        "needs client_ca_file",
    ),
    "unverified client auth": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        "  client_auth_type: RequireAnyClientCert\n",
        4,
        "not supported",
    ),
    "insecure cipher": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        "  cipher_suites:\n    - TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\n"
        "    - TLS_RSA_WITH_RC4_128_SHA\n",
        6,
        "TLS_RSA_WITH_RC4_128_SHA",
    ),
    "key does not match cert": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {other}\n",
        3,
        "the key does not match",
    ),
    "ca is not a certificate": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        "  client_auth_type: VerifyClientCertIfGiven\n"
        "  client_ca_file: {key}\n",
        5,
        "no usable PEM certificate",
    ),
    "header not allowed": (
        "http_server_config:\n  headers:\n    Server: x\n",
        3,
        "unknown key 'Server'",
    ),
    "min above max": (
        "tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        "  min_version: TLS13\n  max_version: TLS12\n",
        5,
        "below min_version",
    ),
}


@pytest.mark.integration
@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_exits_2_naming_file_and_line(case, pki, tmp_path, run_exporter):
    text, line, message = BAD_CONFIGS[case]
    cert, key = pki.server
    config = tmp_path / "web.yml"
    config.write_text(text.format(cert=cert, key=key, ca=pki.ca, other=pki.client[1]))
    result = run_exporter("--web.config.file", str(config), "--collector.disable-defaults")
    assert result.returncode == 2, result
    assert "--web.config.file" in result.stderr
    assert f"{config}:{line}: " in result.stderr, result.stderr
    assert message in result.stderr


@pytest.mark.integration
def test_relative_paths_are_relative_to_the_config_file(
    pki, tmp_path, start_exporter, run_exporter
):
    relative = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
    beside_certs = os.path.join(pki.root, "web-relative.yml")
    with open(beside_certs, "w") as f:
        f.write(relative)
    exp = start_exporter(config_path=beside_certs)
    assert session().get(exp.url + "/healthz", verify=pki.ca, timeout=10).ok
    elsewhere = tmp_path / "web-relative.yml"
    elsewhere.write_text(relative)
    result = run_exporter("--web.config.file", str(elsewhere), "--collector.disable-defaults")
    assert result.returncode == 2 and f"no such file: {tmp_path}/server.crt" in result.stderr


@pytest.mark.integration
def test_an_empty_file_means_plain_http_without_auth(start_exporter):
    exp = start_exporter("", scheme="http")
    assert session().get(exp.url + "/metrics", timeout=10).ok


# --- the bcrypt cache ------------------------------------------------------------------


class CountingCheckpw:
    """Counts real bcrypt verifications (each one still runs)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        real = bcrypt.checkpw

        def counted(password, hashed):
            self.calls += 1
            return real(password, hashed)

        monkeypatch.setattr(bcrypt, "checkpw", counted)


def basic(user, password):
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.unit
def test_a_successful_check_is_remembered_and_a_wrong_password_is_not(password, monkeypatch):
    auth = BasicAuth({"prometheus": password[1].encode()})
    counter = CountingCheckpw(monkeypatch)
    for _ in range(5):
        assert auth.check(basic("prometheus", password[0]))
    assert counter.calls == 1
    for _ in range(3):
        assert not auth.check(basic("prometheus", password[0] + "x"))
    assert counter.calls == 4  # failures pay bcrypt every time: nothing to guess from a cache
    assert not auth.check(basic("someone", password[0]))
    assert counter.calls == 5  # an unknown user pays bcrypt too, so timing hides who exists


@pytest.mark.unit
def test_the_cache_is_per_hash(password):
    first = BasicAuth({"prometheus": password[1].encode()})
    assert first.check(basic("prometheus", password[0]))
    rotated = bcrypt.hashpw(b"new password", bcrypt.gensalt(4))
    second = BasicAuth({"prometheus": rotated})
    assert not second.check(basic("prometheus", password[0]))
    assert second.check(basic("prometheus", "new password"))


@pytest.mark.unit
@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer abc",
        "Basic !!!",
        "Basic " + base64.b64encode(b"no-colon").decode(),
        basic("prometheus", "x" * 100),
    ],
)
def test_malformed_or_overlong_credentials_are_refused(password, header):
    assert not BasicAuth({"prometheus": password[1].encode()}).check(header)


@pytest.mark.unit
def test_htpasswd_style_2y_hashes_work(password):
    y = password[1].replace("$2b$", "$2y$", 1).encode()
    assert BasicAuth({"prometheus": y}).check(basic("prometheus", password[0]))


# --- key material pasted where a file name belongs: named, never shown ----------------


def pasted(text):
    """`text` as a YAML block scalar, as someone pastes a key into the field."""
    return "|\n" + "".join(f"    {line}\n" for line in text.splitlines())


def assert_not_shown(secret, stderr):
    assert "BEGIN" not in stderr
    for chunk in (secret[i : i + 16] for i in range(0, len(secret) - 16, 16)):
        assert chunk not in stderr, chunk


def mtls_fields(pki):
    cert, key = pki.server
    return {
        "cert_file": cert,
        "key_file": key,
        "client_auth_type": "RequireAndVerifyClientCert",
        "client_ca_file": pki.ca,
    }


@pytest.mark.integration
@pytest.mark.parametrize("field", ["cert_file", "key_file", "client_ca_file", "client_auth_type"])
def test_a_private_key_pasted_into_a_field_is_named_never_shown(field, pki, tmp_path, run_exporter):
    key_pem = open(pki.server[1]).read()
    fields = mtls_fields(pki)
    text = "tls_server_config:\n" + "".join(
        f"  {name}: {pasted(key_pem) if name == field else value + chr(10)}"
        for name, value in fields.items()
    )
    config = tmp_path / "web.yml"
    config.write_text(text)
    result = run_exporter("--web.config.file", str(config), "--collector.disable-defaults")
    assert result.returncode == 2, result
    line = 2 + list(fields).index(field)
    assert f"{config}:{line}: {field}" in result.stderr, result.stderr
    assert "looks like PEM text" in result.stderr
    assert_not_shown("".join(key_pem.splitlines()[1:-1]), result.stderr)


LONG_VALUES = {
    # A key's base64 pasted as one line, without its PEM header (which rule names it
    # depends on where its "/" fall).
    "one line of base64": (lambda key: "".join(key.splitlines()[1:-1]), "(not shown)"),
    "longer than PATH_MAX": (lambda key: "/srv" * 1200, "longer than a path can be (4096)"),
    "a name longer than NAME_MAX": (lambda key: "/etc/" + "x" * 300, "longer than a file name"),
}


@pytest.mark.integration
@pytest.mark.parametrize("case", sorted(LONG_VALUES))
def test_a_value_no_path_can_be_is_named_never_shown(case, pki, tmp_path, run_exporter):
    make, message = LONG_VALUES[case]
    value = make(open(pki.server[1]).read())
    config = tmp_path / "web.yml"
    config.write_text(f"tls_server_config:\n  cert_file: {pki.server[0]}\n  key_file: '{value}'\n")
    result = run_exporter("--web.config.file", str(config), "--collector.disable-defaults")
    assert result.returncode == 2, result
    assert f"{config}:3: key_file must be the path of a file" in result.stderr, result.stderr
    assert message in result.stderr
    assert_not_shown(value, result.stderr)


@pytest.mark.integration
def test_a_key_pasted_on_reload_is_logged_never_shown(pki, tmp_path, start_exporter):
    config = tmp_path / "web.yml"
    exp = start_exporter(tls_block(pki), config_path=config)
    key_pem = open(pki.server[1]).read()
    (tmp_path / "next.yml").write_text(
        f"tls_server_config:\n  cert_file: {pasted(key_pem)}  key_file: {pki.server[1]}\n"
    )
    replace_file(config, tmp_path / "next.yml")

    def refused_and_logged():
        # The files are looked at when connections come, at most once a second.
        try:
            session().get(exp.url + "/healthz", verify=pki.ca, timeout=10)
        except requests.RequestException:
            pass
        return "refusing connections" in exp.proc.log_tail()

    assert eventually(refused_and_logged), exp.proc.log_tail()
    log = exp.proc.log_tail(200)
    assert f"{config}:2: cert_file must be the path of a file" in log
    assert_not_shown("".join(key_pem.splitlines()[1:-1]), log)
