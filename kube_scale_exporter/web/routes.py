"""The routes: a landing page at /, metrics at the telemetry path, /healthz.

Each metrics request runs one scrape under a deadline taken from Prometheus'
X-Prometheus-Scrape-Timeout-Seconds header (less a margin for the reply), capped by
--scrape.timeout. At most --web.max-requests scrapes run at once; more get 503, so a
burst of scrapers cannot pile up threads on a node.

With --web.config.file (kube_scale_exporter/web/config.py) connections are TLS, optionally mutual,
and every path but /healthz asks for basic auth before doing any work. The web config
is taken as it is on disk at each handshake and each request, so renewed certificates
and changed users apply without a restart.
Connections, TLS handshakes and deadlines belong to the server (web/server.py); this
module only answers complete requests, and knows a scraper's interface, never a collector.
"""

from __future__ import annotations

import gzip
import logging
import ssl
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from kube_scale_exporter.metrics import Family
from kube_scale_exporter.scrape import Scraper
from kube_scale_exporter.web import kuberbac
from kube_scale_exporter.web.auth import AuthBusy
from kube_scale_exporter.web.exposition import choose_encoder
from kube_scale_exporter.web.kuberbac import KubeRBAC
from kube_scale_exporter.web.answer import Response
from kube_scale_exporter.web.request import Request, accepts_gzip
from kube_scale_exporter.web.server import HTTPServer, Limits, Refused

if TYPE_CHECKING:  # the web config's reader (yaml, bcrypt) loads only where one is given
    from kube_scale_exporter.web.live import Active, LiveWebConfig

log = logging.getLogger("kube_scale_exporter.http")

# Time kept back from Prometheus' scrape timeout to encode and send the answer.
TIMEOUT_MARGIN_SECONDS = 0.25

# Worker threads beyond --web.max-requests, for /healthz and cheap answers.
SPARE_WORKERS = 8

# What the landing page escapes in text and attribute values. The `html` module would do
# it too, but importing it loads its table of every named entity: 0.5 MiB per node pod.
HTML_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;"})


def escape_html(text: str) -> str:
    return text.translate(HTML_ESCAPES)


class App:
    """Everything a request handler needs; built once by the CLI."""

    def __init__(
        self,
        scraper: Scraper,
        telemetry_path: str,
        max_timeout: float,
        max_requests: int,
        process_metrics: Callable[[], list[Family]] | None = None,
        title: str = "kube-scale-exporter",
        web: LiveWebConfig | None = None,
        kube_rbac: KubeRBAC | None = None,
    ):
        self.scraper = scraper
        self.telemetry_path = telemetry_path
        self.max_timeout = max_timeout
        self.process_metrics = process_metrics
        self.title = title
        self.max_requests = max_requests
        self._slots = threading.BoundedSemaphore(max_requests) if max_requests > 0 else None
        self.web = web
        self.kube_rbac = kube_rbac

    def scrape_timeout(self, header: str | None) -> float:
        if header:
            try:
                asked = float(header) - TIMEOUT_MARGIN_SECONDS
            except ValueError:
                asked = self.max_timeout
            return max(0.05, min(asked, self.max_timeout))
        return self.max_timeout

    def metrics(self, timeout: float) -> list[Family]:
        families = self.scraper.scrape(timeout).families
        if self.process_metrics is not None:
            families.extend(self.process_metrics())
        return families

    def try_acquire(self) -> bool:
        return self._slots is None or self._slots.acquire(blocking=False)

    def release(self) -> None:
        if self._slots is not None:
            self._slots.release()

    def landing_page(self) -> bytes:
        names = ", ".join(sorted(c.name for c in self.scraper.collectors)) or "none"
        path = escape_html(self.telemetry_path)
        return (
            f"<html><head><title>{escape_html(self.title)}</title></head><body>"
            f"<h1>{escape_html(self.title)}</h1>"
            f"<p>Enabled collectors: {escape_html(names)}</p>"
            f'<p><a href="{path}">Metrics</a> &middot; <a href="/healthz">Health</a></p>'
            "</body></html>\n"
        ).encode()

    def handle(self, request: Request) -> Response:
        """Answers one request; runs in a worker thread of the server."""
        if request.method not in ("GET", "HEAD"):
            return Response(405, b"only GET and HEAD\n", headers=[("Allow", "GET, HEAD")])
        path = urlsplit(request.target).path
        # Checked per request, not per connection: a password removed from the file stops
        # working on connections that were kept alive too.
        active = self.web.current() if self.web else None
        if self.web is not None and active is None:
            return Response(503, b"web config is broken; see the exporter's log\n", close=True)
        response = self._route(request, path, active)
        if active is not None:
            response.headers[:0] = list(active.config.headers)
        return response

    def _route(self, request: Request, path: str, active: Active | None) -> Response:
        # Every path but /healthz (the kubelet's probes) is checked, before a scrape
        # takes one of the --web.max-requests slots.
        if path != "/healthz":
            refused = self._refused(request, active) or self._unauthorized(request)
            if refused is not None:
                return refused
        if path == self.telemetry_path:
            return self._metrics(request)
        if path == "/":
            return Response(200, self.landing_page(), "text/html; charset=utf-8")
        if path == "/healthz":
            return Response(200, b"ok\n")
        return Response(404, b"not found\n")

    @staticmethod
    def _refused(request: Request, active: Active | None) -> Response | None:
        """The 401/403/503 answer when the client may not go on, else None."""
        if active is None:
            return None
        tls = active.config.tls
        if tls is not None and not tls.peer_allowed(request.peercert):
            return Response(403, b"client certificate not allowed\n")
        auth = active.basic_auth
        if auth is None:
            return None
        try:
            if auth.check(request.header("Authorization"), request.client):
                return None
        except AuthBusy:
            return Response(
                503, b"too many password checks at once; retry\n", headers=[("Retry-After", "1")]
            )
        return Response(
            401,
            b"unauthorized\n",
            headers=[("WWW-Authenticate", 'Basic realm="kube-scale-exporter", charset="UTF-8"')],
        )

    def _unauthorized(self, request: Request) -> Response | None:
        """--web.kube-rbac: the 401/403/429/503 answer for a token the API server does not
        let `get` the telemetry path, else None (web/kuberbac.py)."""
        if self.kube_rbac is None:
            return None
        verdict = self.kube_rbac.check(request.header("Authorization"))
        if verdict == kuberbac.ALLOWED:
            return None
        if verdict == kuberbac.UNAUTHENTICATED:
            return Response(
                401,
                b"unauthorized: send a Kubernetes bearer token\n",
                headers=[("WWW-Authenticate", 'Bearer realm="kube-scale-exporter"')],
            )
        if verdict == kuberbac.FORBIDDEN:
            path = self.kube_rbac.path.encode()
            return Response(403, b"forbidden: the token may not get " + path + b"\n")
        if verdict == kuberbac.BUSY:
            return Response(
                429, b"too many token reviews at once; retry\n", headers=[("Retry-After", "1")]
            )
        return Response(
            503,
            b"cannot check the token with the API server; see the exporter's log\n",
            headers=[("Retry-After", "5")],
        )

    def _metrics(self, request: Request) -> Response:
        if not self.try_acquire():
            return Response(503, b"too many concurrent scrapes; raise --web.max-requests\n")
        try:
            timeout = self.scrape_timeout(request.header("X-Prometheus-Scrape-Timeout-Seconds"))
            encoder, content_type = choose_encoder(request.header("Accept"))
            body = encoder(self.metrics(timeout))
        finally:
            self.release()
        # The body depends on Accept-Encoding: caches between us and the scraper must know.
        headers = [("Vary", "Accept-Encoding")]
        if accepts_gzip(request.header("Accept-Encoding")):
            body = gzip.compress(body, compresslevel=1)
            headers.append(("Content-Encoding", "gzip"))
        return Response(200, body, content_type, headers)

    def tls_for_connection(self) -> ssl.SSLContext | None:
        """The server's hook per new connection: TLS settings as the files are now."""
        if self.web is None:
            return None
        active = self.web.current()
        if active is None:
            raise Refused  # the web config on disk is broken (logged): never serve stale
        return active.ssl_context


def make_server(
    app: App,
    host: str,
    port: int,
    idle_timeout: float = Limits.idle_timeout,
    max_connections: int = Limits.max_connections,
) -> HTTPServer:
    # Workers: every allowed scrape, plus room for /healthz, the landing page and 401s
    # while all scrape slots are taken.
    scrapes = app.max_requests if app.max_requests > 0 else 64
    # A handshake or a request head may take 10 s, never longer than a silent connection
    # may stay: --web.idle-timeout 2s closes a slow handshake after 2 s too.
    started = min(Limits.header_timeout, idle_timeout)
    limits = Limits(
        idle_timeout=idle_timeout,
        max_connections=max_connections,
        workers=scrapes + SPARE_WORKERS,
        handshake_timeout=started,
        header_timeout=started,
    )
    return HTTPServer(host, port, app.handle, limits, app.tls_for_connection)
