"""The --web.config.file through web/config.py's load() (web/configreader.py walks its
YAML, web/tlsconfig.py and web/auth.py check what it names).

The input is the file; beside it are a real CA, a server certificate and key (server.crt,
server.key, ca.crt), so TLS settings that name them load for real. Documented error:
WebConfigError (BadHashError among them). Invariants: a loaded config names only files
that exist, header values hold no line break, users' hashes are bcrypt hashes.
"""

from __future__ import annotations

import os

from fuzz import InvariantBroken, scratch
from kube_scale_exporter.web.config import WebConfigError, load

TARGETS = (
    "kube_scale_exporter.web.config",
    "kube_scale_exporter.web.configreader",
    "kube_scale_exporter.web.tlsconfig",
)
INSTRUMENT = ("yaml",)
_dir = ""


def prepare() -> None:
    """The CA, certificate and key the inputs may name (openssl, once a process)."""
    from testbed.pki import TestCA  # noqa: PLC0415  (openssl: only where this harness runs)

    global _dir
    _dir = scratch("web")
    if not os.path.exists(f"{_dir}/server.key"):
        TestCA(_dir, "ca").issue("server", "subjectAltName=IP:127.0.0.1,DNS:localhost")


def check(data: bytes) -> None:
    path = f"{_dir}/web.yml"
    with open(path, "wb") as f:
        f.write(data)
    try:
        got = load(path)
    except WebConfigError:
        return
    for path in got.files():
        if not os.path.isfile(path):
            raise InvariantBroken(f"names {path}, which does not exist")
    for name, value in got.headers:
        if "\r" in value or "\n" in value:
            raise InvariantBroken(f"header {name} holds a line break")
    for user, hashed in got.users.items():
        if not hashed.startswith((b"$2a$", b"$2b$", b"$2y$")):
            raise InvariantBroken(f"user {user!r}: hash {hashed[:10]!r}")
    if got.tls is not None:
        got.ssl_context()
