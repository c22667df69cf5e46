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

import ipaddress
import logging
import os
import ssl
from dataclasses import dataclass, field

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from kube_scale_exporter.files import WEB_CONFIG_BYTES, FileRefused, read_capped
from kube_scale_exporter.web.auth import BasicAuth, hash_problem

__all__ = ["BasicAuth", "TLSConfig", "WebConfig", "WebConfigError", "load"]

TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert")

# Go's names for the TLS 1.2 suites it offers, and OpenSSL's names for them. Like Go,
# the list applies to TLS 1.2 and older; TLS 1.3 suites are not configurable.
CIPHER_SUITES = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}

# The response headers the toolkit lets a user set; any other name is an error there too.
ALLOWED_HEADERS = (
    "Content-Security-Policy",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "X-XSS-Protection",
    "Strict-Transport-Security",
)

log = logging.getLogger(__name__)


class WebConfigError(ValueError):
    """A bad web config file; the message names the file and line."""


class BadHashError(WebConfigError):
    """A user's hash bcrypt cannot (or should not) check: the rest of the file may be fine."""


@dataclass(frozen=True)
class TLSConfig:
    cert_file: str
    key_file: str
    client_auth_type: str = "NoClientCert"
    client_ca_file: str | None = None
    client_allowed_sans: tuple[str, ...] = ()
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = False

    def context(self) -> ssl.SSLContext:
        """A server-side SSLContext; raises ssl.SSLError/OSError for unusable files."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = TLS_VERSIONS[self.min_version]
        ctx.maximum_version = TLS_VERSIONS[self.max_version]
        if self.cipher_suites:
            ctx.set_ciphers(":".join(CIPHER_SUITES[name] for name in self.cipher_suites))
        if self.prefer_server_cipher_suites:
            ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
        ctx.load_cert_chain(self.cert_file, self.key_file)
        ctx.verify_mode = CLIENT_AUTH[self.client_auth_type]
        if self.client_ca_file:
            ctx.load_verify_locations(cafile=self.client_ca_file)
        return ctx

    def peer_allowed(self, peercert: dict | None) -> bool:
        """client_allowed_sans: the verified client certificate must carry one of them."""
        if not self.client_allowed_sans:
            return True
        if not peercert:
            return False
        names = {_san(kind, value) for kind, value in peercert.get("subjectAltName", ())}
        return not names.isdisjoint(_san("", allowed) for allowed in self.client_allowed_sans)


def _san(kind: str, value: str) -> str:
    """A SAN as Go's exporter-toolkit compares it: IP addresses in their canonical text
    (Python writes an IPv6 SAN as 2001:DB8:0:0:0:0:0:1, Go and users as 2001:db8::1)."""
    value = value.strip()
    if kind in ("", "IP Address"):
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            pass
    return value


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
    reader = _Reader(path)
    if root is None or (isinstance(root, ScalarNode) and root.value == ""):
        return WebConfig(path=path)
    top = reader.mapping(
        root, "the file", {"tls_server_config", "http_server_config", "basic_auth_users"}
    )
    tls = reader.tls(top["tls_server_config"]) if "tls_server_config" in top else None
    headers = reader.http(top["http_server_config"]) if "http_server_config" in top else ()
    users = reader.users(top["basic_auth_users"]) if "basic_auth_users" in top else {}
    return WebConfig(path=path, tls=tls, users=users, headers=headers)


class _Reader:
    """Walks PyYAML's node tree so every error can point at its line."""

    def __init__(self, path: str):
        self.path = path
        self.base = os.path.dirname(os.path.abspath(path))

    def error(self, node: Node, message: str) -> WebConfigError:
        return WebConfigError(f"{self.path}:{node.start_mark.line + 1}: {message}")

    def mapping(self, node: Node, what: str, allowed: set[str]) -> dict[str, Node]:
        if isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:null":
            return {}
        if not isinstance(node, MappingNode):
            raise self.error(node, f"{what} must be a mapping")
        out: dict[str, Node] = {}
        for key, value in node.value:
            name = self.string(key, "a key")
            if name not in allowed:
                raise self.error(
                    key, f"unknown key {name!r} in {what} (known: {', '.join(sorted(allowed))})"
                )
            if name in out:
                raise self.error(key, f"{name!r} given twice in {what}")
            out[name] = value
        return out

    def string(self, node: Node, what: str) -> str:
        if not isinstance(node, ScalarNode) or node.tag == "tag:yaml.org,2002:null":
            raise self.error(node, f"{what} must be a string")
        return node.value

    def choice(self, node: Node, what: str, choices) -> str:
        value = self.string(node, what)
        if value not in choices:
            raise self.error(node, f"{what}: {value!r} is not one of {', '.join(choices)}")
        return value

    def boolean(self, node: Node, what: str) -> bool:
        if not isinstance(node, ScalarNode) or node.tag != "tag:yaml.org,2002:bool":
            raise self.error(node, f"{what} must be true or false")
        return node.value.lower() in ("true", "yes", "on")

    def strings(self, node: Node, what: str) -> tuple[str, ...]:
        if not isinstance(node, SequenceNode):
            raise self.error(node, f"{what} must be a list")
        return tuple(self.string(item, f"an item of {what}") for item in node.value)

    def file(self, node: Node, what: str) -> str:
        value = self.string(node, what)
        resolved = os.path.join(self.base, value)
        if not os.path.isfile(resolved):
            raise self.error(node, f"{what}: no such file: {resolved}")
        return resolved

    def tls(self, node: Node) -> TLSConfig:
        fields = self.mapping(
            node,
            "tls_server_config",
            {
                "cert_file",
                "key_file",
                "client_auth_type",
                "client_ca_file",
                "client_allowed_sans",
                "min_version",
                "max_version",
                "cipher_suites",
                "prefer_server_cipher_suites",
                "curve_preferences",
            },
        )
        if "curve_preferences" in fields:
            raise self.error(
                fields["curve_preferences"],
                "curve_preferences is not supported "
                "(Python's ssl cannot set a preference list); remove it",
            )
        for required in ("cert_file", "key_file"):
            if required not in fields:
                raise self.error(node, f"tls_server_config: {required} is required")
        kwargs: dict = {
            "cert_file": self.file(fields["cert_file"], "cert_file"),
            "key_file": self.file(fields["key_file"], "key_file"),
        }
        if "client_auth_type" in fields:
            auth_node = fields["client_auth_type"]
            value = self.string(auth_node, "client_auth_type")
            if value in UNVERIFIED_CLIENT_AUTH:
                raise self.error(
                    auth_node,
                    f"client_auth_type {value} is not supported: an "
                    "unverified client certificate proves nothing; use "
                    "VerifyClientCertIfGiven or RequireAndVerifyClientCert",
                )
            kwargs["client_auth_type"] = self.choice(auth_node, "client_auth_type", CLIENT_AUTH)
        if "client_ca_file" in fields:
            kwargs["client_ca_file"] = self.file(fields["client_ca_file"], "client_ca_file")
        verifies = kwargs.get("client_auth_type", "NoClientCert") != "NoClientCert"
        if verifies and "client_ca_file" not in kwargs:
            raise self.error(
                fields["client_auth_type"],
                f"client_auth_type {kwargs['client_auth_type']} needs client_ca_file",
            )
        if "client_ca_file" in kwargs and not verifies:
            raise self.error(
                fields["client_ca_file"],
                "client_ca_file is given but "
                "client_auth_type is NoClientCert; set it to "
                "RequireAndVerifyClientCert or VerifyClientCertIfGiven",
            )
        if "client_allowed_sans" in fields:
            sans = self.strings(fields["client_allowed_sans"], "client_allowed_sans")
            if not verifies:
                raise self.error(
                    fields["client_allowed_sans"],
                    "client_allowed_sans needs "
                    "a client_auth_type that verifies client certificates",
                )
            kwargs["client_allowed_sans"] = sans
        for key in ("min_version", "max_version"):
            if key in fields:
                kwargs[key] = self.choice(fields[key], key, TLS_VERSIONS)
        low, high = kwargs.get("min_version", "TLS12"), kwargs.get("max_version", "TLS13")
        if TLS_VERSIONS[low] > TLS_VERSIONS[high]:
            raise self.error(
                fields.get("max_version", node), f"max_version {high} is below min_version {low}"
            )
        if "cipher_suites" in fields:
            suites_node = fields["cipher_suites"]
            suites = self.strings(suites_node, "cipher_suites")
            for item, name in zip(suites_node.value, suites, strict=True):
                if name not in CIPHER_SUITES:
                    raise self.error(item, f"cipher_suites: unknown or insecure suite {name!r}")
            kwargs["cipher_suites"] = suites
        if "prefer_server_cipher_suites" in fields:
            kwargs["prefer_server_cipher_suites"] = self.boolean(
                fields["prefer_server_cipher_suites"], "prefer_server_cipher_suites"
            )
        self.usable(kwargs, fields)
        return TLSConfig(**kwargs)

    def usable(self, kwargs: dict, fields: dict[str, Node]) -> None:
        """Load the files as the server will, so a bad one is reported at its line."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            ctx.load_cert_chain(kwargs["cert_file"], kwargs["key_file"])
        except (ssl.SSLError, OSError) as exc:
            raise self.error(
                fields["key_file"],
                "cannot use cert_file with key_file (not PEM, "
                f"or the key does not match the certificate): {exc}",
            ) from None
        if "client_ca_file" in kwargs:
            try:
                ctx.load_verify_locations(cafile=kwargs["client_ca_file"])
            except (ssl.SSLError, OSError) as exc:
                raise self.error(
                    fields["client_ca_file"],
                    f"client_ca_file holds no usable PEM certificate: {exc}",
                ) from None

    def http(self, node: Node) -> tuple[tuple[str, str], ...]:
        fields = self.mapping(node, "http_server_config", {"http2", "headers"})
        if "http2" in fields:
            self.boolean(fields["http2"], "http2")
        if "headers" not in fields:
            return ()
        headers = self.mapping(
            fields["headers"], "http_server_config.headers", set(ALLOWED_HEADERS)
        )
        out = []
        for name, value in headers.items():
            text = self.string(value, name)
            if "\r" in text or "\n" in text:
                raise self.error(value, f"{name}: a header value cannot hold a line break")
            out.append((name, text))
        return tuple(out)

    def users(self, node: Node) -> dict[str, bytes]:
        if isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:null":
            return {}
        if not isinstance(node, MappingNode):
            raise self.error(node, "basic_auth_users must be a mapping of user: bcrypt hash")
        users: dict[str, bytes] = {}
        for key, value in node.value:
            user = self.string(key, "a user name")
            if user in users:
                raise self.error(key, f"user {user!r} given twice")
            hashed = self.string(value, f"the hash of {user!r}")
            problem = hash_problem(hashed)
            if problem is not None:
                raise BadHashError(
                    f"{self.path}:{value.start_mark.line + 1}: the password of {user!r}: {problem}"
                )
            users[user] = hashed.encode()
        return users
