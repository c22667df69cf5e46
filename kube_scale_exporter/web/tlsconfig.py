"""tls_server_config: its checks, and the SSLContext and client check it makes."""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass

from yaml.nodes import Node

from kube_scale_exporter.web.configreader import ConfigReader, shown

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


def read_tls(reader: ConfigReader, node: Node) -> TLSConfig:
    """The tls_server_config section; raises WebConfigError naming file and line."""
    fields = reader.mapping(
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
        raise reader.error(
            fields["curve_preferences"],
            "curve_preferences is not supported "
            "(Python's ssl cannot set a preference list); remove it",
        )
    for required in ("cert_file", "key_file"):
        if required not in fields:
            raise reader.error(node, f"tls_server_config: {required} is required")
    kwargs: dict = {
        "cert_file": reader.file(fields["cert_file"], "cert_file"),
        "key_file": reader.file(fields["key_file"], "key_file"),
    }
    if "client_auth_type" in fields:
        auth_node = fields["client_auth_type"]
        value = reader.string(auth_node, "client_auth_type")
        if value in UNVERIFIED_CLIENT_AUTH:
            raise reader.error(
                auth_node,
                f"client_auth_type {value} is not supported: an "
                "unverified client certificate proves nothing; use "
                "VerifyClientCertIfGiven or RequireAndVerifyClientCert",
            )
        kwargs["client_auth_type"] = reader.choice(auth_node, "client_auth_type", CLIENT_AUTH)
    if "client_ca_file" in fields:
        kwargs["client_ca_file"] = reader.file(fields["client_ca_file"], "client_ca_file")
    verifies = kwargs.get("client_auth_type", "NoClientCert") != "NoClientCert"
    if verifies and "client_ca_file" not in kwargs:
        raise reader.error(
            fields["client_auth_type"],
            f"client_auth_type {kwargs['client_auth_type']} needs client_ca_file",
        )
    if "client_ca_file" in kwargs and not verifies:
        raise reader.error(
            fields["client_ca_file"],
            "client_ca_file is given but "
            "client_auth_type is NoClientCert; set it to "
            "RequireAndVerifyClientCert or VerifyClientCertIfGiven",
        )
    if "client_allowed_sans" in fields:
        sans = reader.strings(fields["client_allowed_sans"], "client_allowed_sans")
        if not verifies:
            raise reader.error(
                fields["client_allowed_sans"],
                "client_allowed_sans needs a client_auth_type that verifies client certificates",
            )
        kwargs["client_allowed_sans"] = sans
    for key in ("min_version", "max_version"):
        if key in fields:
            kwargs[key] = reader.choice(fields[key], key, TLS_VERSIONS)
    low, high = kwargs.get("min_version", "TLS12"), kwargs.get("max_version", "TLS13")
    if TLS_VERSIONS[low] > TLS_VERSIONS[high]:
        raise reader.error(
            fields.get("max_version", node), f"max_version {high} is below min_version {low}"
        )
    if "cipher_suites" in fields:
        suites_node = fields["cipher_suites"]
        suites = reader.strings(suites_node, "cipher_suites")
        for item, name in zip(suites_node.value, suites, strict=True):
            if name not in CIPHER_SUITES:
                raise reader.error(item, f"cipher_suites: unknown or insecure suite {shown(name)}")
        kwargs["cipher_suites"] = suites
    if "prefer_server_cipher_suites" in fields:
        kwargs["prefer_server_cipher_suites"] = reader.boolean(
            fields["prefer_server_cipher_suites"], "prefer_server_cipher_suites"
        )
    _check_usable(reader, kwargs, fields)
    return TLSConfig(**kwargs)


def _check_usable(reader: ConfigReader, kwargs: dict, fields: dict[str, Node]) -> None:
    """Load the files as the server will, so a bad one is reported at its line."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(kwargs["cert_file"], kwargs["key_file"])
    except (ssl.SSLError, OSError) as exc:
        raise reader.error(
            fields["key_file"],
            "cannot use cert_file with key_file (not PEM, "
            f"or the key does not match the certificate): {exc}",
        ) from None
    if "client_ca_file" in kwargs:
        try:
            ctx.load_verify_locations(cafile=kwargs["client_ca_file"])
        except (ssl.SSLError, OSError) as exc:
            raise reader.error(
                fields["client_ca_file"],
                f"client_ca_file holds no usable PEM certificate: {exc}",
            ) from None
