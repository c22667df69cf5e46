"""Config and client against the real API server: every credential kind, in-cluster, errors."""

import os
import shutil

import pytest
import yaml

from kube_scale_exporter import httpclient, kube
from kube_scale_exporter.kube.config import ConfigError, from_kubeconfig, in_cluster
from testbed.builds import kube_version
from testbed.kube_apiserver import release


def _version(client):
    return client.get("/version")["gitVersion"]


@pytest.mark.integration
def test_kubeconfig_with_token_and_ca_file(apiserver, make_client):
    client = make_client(apiserver)
    assert _version(client) == kube_version(release())


@pytest.mark.integration
def test_kubeconfig_with_inline_ca(apiserver, make_client):
    client = make_client(apiserver, ca_inline=True)
    assert client.config.verify.startswith(client.config._tmpdir.name)
    assert os.stat(client.config.verify).st_mode & 0o777 == 0o600
    assert _version(client) == kube_version(release())
    # Authenticated as the admin: a list needs more than the public /version.
    assert "items" in client.get("/api/v1/namespaces")


@pytest.mark.integration
def test_kubeconfig_with_client_certificate(apiserver, make_client):
    client = make_client(apiserver, client_cert=apiserver.admin_cert)
    assert client.config.token is None
    assert "items" in client.get("/api/v1/namespaces")


@pytest.mark.integration
def test_wrong_ca_is_refused(apiserver, make_client, tmp_path):
    client = make_client(apiserver)
    client.config.verify = apiserver.client_ca[0]  # a CA that did not sign the server
    with pytest.raises(httpclient.TLSError):
        client.get("/version")


@pytest.mark.integration
def test_requests_ca_bundle_in_environment_does_not_replace_the_cluster_ca(
    apiserver, make_client, monkeypatch
):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", apiserver.client_ca[0])
    client = make_client(apiserver)
    assert _version(client) == kube_version(release())


@pytest.mark.integration
def test_limited_user_gets_403_as_api_error(apiserver, make_client):
    client = make_client(apiserver, token=apiserver.limited_token)
    with pytest.raises(kube.ApiError) as err:
        client.get("/api/v1/secrets")  # granted to no test user but the admin
    assert err.value.status == 403 and err.value.reason == "Forbidden"


@pytest.mark.integration
def test_in_cluster_config_reads_the_service_account_files(apiserver, tmp_path):
    sa = tmp_path / "sa"
    sa.mkdir()
    shutil.copy(apiserver.ca, sa / "ca.crt")
    (sa / "token").write_text(apiserver.admin_token + "\n")
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(apiserver.port)}
    client = kube.KubeClient(in_cluster(sa_dir=str(sa), environ=env))
    try:
        assert "items" in client.get("/api/v1/namespaces")
    finally:
        client.close()


@pytest.mark.integration
def test_load_order_flag_then_env_then_in_cluster(apiserver, tmp_path):
    flag = apiserver.write_kubeconfig(tmp_path / "flag")
    env_file = tmp_path / "env"
    with open(flag) as f:
        doc = yaml.safe_load(f)
    doc["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    env_file.write_text(yaml.safe_dump(doc))
    env = {"KUBECONFIG": str(env_file)}
    assert kube.load(flag, environ=env).server == apiserver.server
    assert kube.load(None, environ=env).server == "https://127.0.0.1:1"
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST"):
        kube.load(None, environ={})


@pytest.mark.integration
def test_kubeconfig_list_first_file_wins_and_missing_files_are_skipped(apiserver, tmp_path):
    first = apiserver.write_kubeconfig(tmp_path / "a", token="first-token")
    second = apiserver.write_kubeconfig(tmp_path / "b", token="second-token")
    cfg = from_kubeconfig([str(tmp_path / "missing"), first, second])
    assert cfg.token.get() == "first-token"


@pytest.mark.integration
def test_relative_paths_resolve_against_the_kubeconfig_directory(apiserver, tmp_path):
    shutil.copy(apiserver.ca, tmp_path / "ca.crt")
    (tmp_path / "tok").write_text(apiserver.admin_token)
    (tmp_path / "kc").write_text(
        yaml.safe_dump(
            {
                "current-context": "c",
                "clusters": [
                    {
                        "name": "k",
                        "cluster": {"server": apiserver.server, "certificate-authority": "ca.crt"},
                    }
                ],
                "users": [{"name": "u", "user": {"tokenFile": "tok"}}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            }
        )
    )
    client = kube.KubeClient(from_kubeconfig([str(tmp_path / "kc")]))
    try:
        assert "items" in client.get("/api/v1/namespaces")
    finally:
        client.close()


@pytest.mark.unit
@pytest.mark.parametrize(
    "user, message",
    [
        ({"exec": {"command": "aws"}}, "exec/auth-provider"),
        (
            {"client-certificate": "/nonexistent.crt", "client-key": "/nonexistent.key"},
            "does not exist",
        ),
        (
            {"client-certificate-data": "bm90IGEgY2VydA=="},
            "both a client certificate and a client key",
        ),
        ({"token-data": "x", "client-key-data": "%%%"}, "not valid base64"),
    ],
)
def test_unusable_kubeconfigs_say_why(tmp_path, user, message):
    (tmp_path / "kc").write_text(
        yaml.safe_dump(
            {
                "current-context": "c",
                "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            }
        )
    )
    with pytest.raises(ConfigError, match=message):
        from_kubeconfig([str(tmp_path / "kc")])


@pytest.mark.unit
def test_unknown_current_context(tmp_path):
    (tmp_path / "kc").write_text(yaml.safe_dump({"current-context": "nope", "contexts": []}))
    with pytest.raises(ConfigError, match="current-context 'nope'"):
        from_kubeconfig([str(tmp_path / "kc")])


@pytest.mark.unit
def test_an_error_answer_nested_too_deep_is_an_api_error():
    """Found with fuzz/kube_list.py: the body of an error answer (from whatever stands in
    front of the API server) is read for a Status; JSON nested past the recursion limit
    raised RecursionError out of the client instead of an ApiError with the status."""
    import http.server  # noqa: PLC0415  (this test's peer only)
    import threading  # noqa: PLC0415

    class Junk(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"[" * 4000
            self.send_response(502)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Junk)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = kube.KubeClient(kube.KubeConfig(f"http://127.0.0.1:{server.server_port}"))
        with pytest.raises(kube.ApiError) as raised:
            client.get("/api/v1/pods")
        assert raised.value.status == 502 and raised.value.message.startswith("[[[")
    finally:
        server.shutdown()
        server.server_close()
