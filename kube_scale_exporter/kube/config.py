"""Where the API server is and how to authenticate: in-cluster or from a kubeconfig file.

`load(kubeconfig=None)` picks, like kubectl and client-go do: the `--kube.kubeconfig` path,
else the KUBECONFIG environment variable (a list of files, first value wins), else the
pod's service account. Supported kubeconfig credentials: bearer token (`token`,
`tokenFile`), client certificate and key (file or `-data`), CA (file or `-data`) or
`insecure-skip-tls-verify`. exec and auth-provider plugins are refused with a clear error:
they would run other programs from the exporter.
"""

import base64
import os
import tempfile
from dataclasses import dataclass, field

from kube_scale_exporter.files import KUBECONFIG_BYTES, TOKEN_BYTES, read_capped

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class ConfigError(Exception):
    """The configuration cannot be used; the message says which setting and why."""


class TokenFile:
    """A bearer token read from a file and read again whenever the file changes.

    Projected service-account tokens rotate (the kubelet rewrites the file about hourly);
    a stat per request notices the new one, and `invalidate()` (after a 401) forces a read
    even when the change was too quick for the file's timestamps to show.
    """

    def __init__(self, path):
        self.path = path
        self._stamp = None
        self._token = ""

    def get(self) -> str:
        st = os.stat(self.path)
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            data = read_capped(self.path, TOKEN_BYTES, "TOKEN_BYTES")
            self._token = data.decode("utf-8").strip()
            self._stamp = stamp
        return self._token

    def invalidate(self):
        self._stamp = None


class StaticToken:
    def __init__(self, token):
        self._token = token

    def get(self) -> str:
        return self._token

    def invalidate(self):
        pass


@dataclass
class KubeConfig:
    """Everything a request needs: base URL, TLS verification, client auth."""

    server: str
    verify: object = True  # CA bundle path, True (system CAs) or False
    token: object = None  # TokenFile | StaticToken | None
    client_cert: tuple | None = None  # (cert path, key path)
    source: str = ""  # where it came from, for messages
    _tmpdir: object = field(default=None, repr=False)

    def close(self):
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None


def in_cluster(sa_dir=SERVICE_ACCOUNT_DIR, environ=os.environ) -> KubeConfig:
    host = environ.get("KUBERNETES_SERVICE_HOST")
    port = environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError(
            "not in a cluster (KUBERNETES_SERVICE_HOST/PORT unset) and no "
            "kubeconfig given: pass --kube.kubeconfig or set KUBECONFIG"
        )
    if ":" in host:
        host = f"[{host}]"
    token_path = os.path.join(sa_dir, "token")
    ca_path = os.path.join(sa_dir, "ca.crt")
    for path in (token_path, ca_path):
        if not os.path.exists(path):
            raise ConfigError(
                f"in-cluster config: {path} is missing (is the service account token mounted?)"
            )
    return KubeConfig(
        server=f"https://{host}:{port}",
        verify=ca_path,
        token=TokenFile(token_path),
        source="in-cluster service account",
    )


def load(kubeconfig=None, environ=os.environ) -> KubeConfig:
    """The flag's file, else $KUBECONFIG, else the in-cluster service account."""
    if kubeconfig:
        return from_kubeconfig([kubeconfig], source="--kube.kubeconfig")
    paths = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if paths:
        return from_kubeconfig(paths, source="KUBECONFIG")
    return in_cluster(environ=environ)


def _merge(paths, source):
    """kubectl's merge rule: for each named entry and for current-context, first file wins."""
    import yaml  # noqa: PLC0415  (kubeconfig files only: in-cluster config needs no YAML)

    merged = {"clusters": {}, "users": {}, "contexts": {}, "current-context": "", "dirs": {}}
    for path in paths:
        try:
            doc = yaml.safe_load(read_capped(path, KUBECONFIG_BYTES, "KUBECONFIG_BYTES")) or {}
        except FileNotFoundError:
            if len(paths) > 1:
                continue  # kubectl ignores missing files in a KUBECONFIG list
            raise ConfigError(f"{source}: {path} does not exist") from None
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"{source}: cannot read {path}: {e}") from None
        if not isinstance(doc, dict):
            raise ConfigError(f"{source}: {path} is not a kubeconfig mapping")
        base = os.path.dirname(os.path.abspath(path))
        for kind, inner in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for entry in doc.get(kind) or []:
                name = entry.get("name")
                if name is not None and name not in merged[kind]:
                    merged[kind][name] = entry.get(inner) or {}
                    merged["dirs"][(kind, name)] = base
        if not merged["current-context"]:
            merged["current-context"] = doc.get("current-context") or ""
    return merged


def from_kubeconfig(paths, source="kubeconfig") -> KubeConfig:
    m = _merge(list(paths), source)
    ctx_name = m["current-context"]
    if not ctx_name or ctx_name not in m["contexts"]:
        raise ConfigError(f"{source}: current-context {ctx_name!r} is not defined")
    ctx = m["contexts"][ctx_name]
    cluster = m["clusters"].get(ctx.get("cluster"))
    user = m["users"].get(ctx.get("user"), {})
    if cluster is None or not cluster.get("server"):
        raise ConfigError(f"{source}: context {ctx_name!r} has no cluster with a server")
    cdir = m["dirs"][("clusters", ctx["cluster"])]
    udir = m["dirs"].get(("users", ctx.get("user")), cdir)
    if "exec" in user or "auth-provider" in user:
        raise ConfigError(
            f"{source}: user {ctx.get('user')!r} uses an exec/auth-provider "
            "plugin; give a token, tokenFile or client certificate instead"
        )

    tmp = tempfile.TemporaryDirectory(prefix="kubescale-kubeconfig-")
    cfg = KubeConfig(server=cluster["server"].rstrip("/"), source=source, _tmpdir=tmp)
    try:
        if cluster.get("insecure-skip-tls-verify"):
            cfg.verify = False
        else:
            ca = _file_or_data(cluster, "certificate-authority", cdir, tmp.name, "ca.crt", source)
            cfg.verify = ca or True
        if user.get("token"):
            cfg.token = StaticToken(user["token"])
        elif user.get("tokenFile"):
            cfg.token = TokenFile(_resolve(user["tokenFile"], udir))
        cert = _file_or_data(user, "client-certificate", udir, tmp.name, "client.crt", source)
        key = _file_or_data(user, "client-key", udir, tmp.name, "client.key", source)
        if bool(cert) != bool(key):
            raise ConfigError(
                f"{source}: user {ctx.get('user')!r} needs both a client "
                "certificate and a client key"
            )
        if cert:
            cfg.client_cert = (cert, key)
    except Exception:
        tmp.cleanup()
        raise
    return cfg


def _resolve(path, base):
    return path if os.path.isabs(path) else os.path.join(base, path)


def _file_or_data(section, key, base, tmpdir, name, source):
    """Path of `key`, or of `key-data` decoded into a private temp file; None if neither."""
    data = section.get(f"{key}-data")
    if data:
        try:
            raw = base64.b64decode(data, validate=True)
        except ValueError:
            raise ConfigError(f"{source}: {key}-data is not valid base64") from None
        path = os.path.join(tmpdir, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        return path
    if section.get(key):
        path = _resolve(section[key], base)
        if not os.path.exists(path):
            raise ConfigError(f"{source}: {key} {path} does not exist")
        return path
    return None
