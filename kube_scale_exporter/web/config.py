"""`--web.config.file`: TLS, mTLS, basic auth and response headers for the HTTP server.

The file uses the Prometheus exporter-toolkit format, so a file written for
node_exporter works here unchanged:

    tls_server_config:
      cert_file: server.crt          # relative paths are relative to this file
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert
      client_ca_file: ca.crt
      client_allowed_sans: [prometheus.monitoring.svc]
      min_version: TLS12
      max_version: TLS13
      cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
      prefer_server_cipher_suites: true
    http_server_config:
      headers:
        Strict-Transport-Security: max-age=31536000
    basic_auth_users:
      prometheus: $2y$10$...         # bcrypt hash, e.g. from `htpasswd -nBC 10 ""`

As in the toolkit, unknown keys are errors. The whole file is checked at start-up; a
mistake is reported with the file and line at fault and the exporter exits 2.

Like the toolkit, the exporter follows the file: when it, or a certificate, key or CA it
names, changes on disk (a renewed certificate, a rotated Secret), the next request
(users, headers) and the next handshake (TLS) use the new contents; no restart. A change
that breaks the file is logged and, until it is fixed, connections are refused rather
than served with stale settings; except a change whose only fault is a user's bcrypt
hash (a cost outside 04-14, a salt or hash bcrypt cannot use: web/auth.py), which is
logged and not applied, the previous settings staying in force.

What differs from the toolkit, on purpose: client_auth_type RequestClientCert and
RequireAnyClientCert are refused (a certificate nobody verifies proves nothing, and
Python's ssl cannot ask for one without verifying it); curve_preferences is refused
(Python's ssl sets one curve, not a preference list); HTTP/2 is never offered, so
http_server_config.http2 is accepted and has no effect. /healthz answers without basic
auth, so that kubelet probes need no password; it tells nothing but "ok".
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode

from kube_scale_exporter.files import WEB_CONFIG_BYTES, FileRefused, read_capped
from kube_scale_exporter.web.auth import BasicAuth, hash_problem
from kube_scale_exporter.web.configreader import ConfigReader, WebConfigError, shown
from kube_scale_exporter.web.tlsconfig import TLSConfig, read_tls

__all__ = ["BasicAuth", "TLSConfig", "WebConfig", "WebConfigError", "load"]

# The response headers the toolkit lets a user set; any other name is an error there too.
ALLOWED_HEADERS = (
    "Content-Security-Policy",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "X-XSS-Protection",
    "Strict-Transport-Security",
)


class BadHashError(WebConfigError):
    """A user's hash bcrypt cannot (or should not) check: the rest of the file may be fine."""


@dataclass(frozen=True)
class WebConfig:
    path: str
    tls: TLSConfig | None = None
    users: dict[str, bytes] = field(default_factory=dict)
    headers: tuple[tuple[str, str], ...] = ()

    def ssl_context(self) -> ssl.SSLContext | None:
        return self.tls.context() if self.tls else None

    def basic_auth(self) -> BasicAuth | None:
        return BasicAuth(self.users) if self.users else None

    def files(self) -> tuple[str, ...]:
        """The file itself and every file it names: what a change is looked for in."""
        named = (self.tls.cert_file, self.tls.key_file, self.tls.client_ca_file) if self.tls else ()
        return (self.path, *(f for f in named if f))


def load(path: str) -> WebConfig:
    """Read and check a web config file; raises WebConfigError naming file and line."""
    try:
        text = read_capped(path, WEB_CONFIG_BYTES, "WEB_CONFIG_BYTES").decode("utf-8")
    except FileRefused as exc:
        raise WebConfigError(exc.strerror) from None
    except OSError as exc:
        raise WebConfigError(f"{path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise WebConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:
        raise WebConfigError(f"{path}: nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        raise WebConfigError(f"{where}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
    reader = ConfigReader(path)
    if root is None or (isinstance(root, ScalarNode) and root.value == ""):
        return WebConfig(path=path)
    top = reader.mapping(
        root, "the file", {"tls_server_config", "http_server_config", "basic_auth_users"}
    )
    tls = read_tls(reader, top["tls_server_config"]) if "tls_server_config" in top else None
    headers = _read_http(reader, top["http_server_config"]) if "http_server_config" in top else ()
    users = _read_users(reader, top["basic_auth_users"]) if "basic_auth_users" in top else {}
    return WebConfig(path=path, tls=tls, users=users, headers=headers)


def _read_http(reader: ConfigReader, node: Node) -> tuple[tuple[str, str], ...]:
    fields = reader.mapping(node, "http_server_config", {"http2", "headers"})
    if "http2" in fields:
        reader.boolean(fields["http2"], "http2")
    if "headers" not in fields:
        return ()
    headers = reader.mapping(fields["headers"], "http_server_config.headers", set(ALLOWED_HEADERS))
    out = []
    for name, value in headers.items():
        text = reader.string(value, name)
        if "\r" in text or "\n" in text:
            raise reader.error(value, f"{name}: a header value cannot hold a line break")
        out.append((name, text))
    return tuple(out)


def _read_users(reader: ConfigReader, node: Node) -> dict[str, bytes]:
    if isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:null":
        return {}
    if not isinstance(node, MappingNode):
        raise reader.error(node, "basic_auth_users must be a mapping of user: bcrypt hash")
    users: dict[str, bytes] = {}
    for key, value in node.value:
        user = reader.string(key, "a user name")
        if user in users:
            raise reader.error(key, f"user {shown(user)} given twice")
        hashed = reader.string(value, f"the hash of {shown(user)}")
        problem = hash_problem(hashed)
        if problem is not None:
            raise BadHashError(
                f"{reader.path}:{value.start_mark.line + 1}: the password of {shown(user)}: "
                f"{problem}"
            )
        users[user] = hashed.encode()
    return users
