"""The HTTP side: a landing page at /, metrics at the telemetry path, /healthz.

Each metrics request runs one scrape under a deadline taken from Prometheus'
X-Prometheus-Scrape-Timeout-Seconds header (less a margin for the reply), capped by
--scrape.timeout. At most --web.max-requests scrapes run at once; more get 503, so a
burst of scrapers cannot pile up threads on a node.

With --web.config.file (kube_scale_exporter/webconfig.py) connections are TLS, optionally mutual,
and every path but /healthz asks for basic auth before doing any work. The web config
is taken as it is on disk at each handshake and each request, so renewed certificates
and changed users apply without a restart.
The TLS handshake runs in the connection's own thread, under a timeout, so a slow or
silent client cannot hold up the accept loop.
"""
from __future__ import annotations

import gzip
import html
import logging
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from kube_scale_exporter.scrape import Scraper
from kube_scale_exporter.webconfig import Active, LiveWebConfig

log = logging.getLogger(__name__)

# Time kept back from Prometheus' scrape timeout to encode and send the answer.
TIMEOUT_MARGIN_SECONDS = 0.25

# A TLS client has this long to finish its handshake.
HANDSHAKE_TIMEOUT_SECONDS = 10.0


class _Families:
    """Adapts one scrape's metric families to what prometheus_client's encoders read."""

    def __init__(self, families):
        self._families = families

    def collect(self):
        return iter(self._families)


class App:
    """Everything a request handler needs; built once by the CLI."""

    def __init__(self, scraper: Scraper, telemetry_path: str, max_timeout: float,
                 max_requests: int, extra_registry: CollectorRegistry | None = None,
                 title: str = "kube-scale-exporter", web: LiveWebConfig | None = None):
        self.scraper = scraper
        self.telemetry_path = telemetry_path
        self.max_timeout = max_timeout
        self.extra_registry = extra_registry
        self.title = title
        self._slots = threading.BoundedSemaphore(max_requests) if max_requests > 0 else None
        self.web = web

    def scrape_timeout(self, header: str | None) -> float:
        if header:
            try:
                asked = float(header) - TIMEOUT_MARGIN_SECONDS
            except ValueError:
                asked = self.max_timeout
            return max(0.05, min(asked, self.max_timeout))
        return self.max_timeout

    def metrics(self, timeout: float):
        families = self.scraper.scrape(timeout).families
        if self.extra_registry is not None:
            families.extend(self.extra_registry.collect())
        return _Families(families)

    def try_acquire(self) -> bool:
        return self._slots is None or self._slots.acquire(blocking=False)

    def release(self) -> None:
        if self._slots is not None:
            self._slots.release()

    def landing_page(self) -> bytes:
        names = ", ".join(sorted(c.name for c in self.scraper.collectors)) or "none"
        path = html.escape(self.telemetry_path)
        return (
            f"<html><head><title>{html.escape(self.title)}</title></head><body>"
            f"<h1>{html.escape(self.title)}</h1>"
            f"<p>Enabled collectors: {html.escape(names)}</p>"
            f'<p><a href="{path}">Metrics</a> &middot; <a href="/healthz">Health</a></p>'
            "</body></html>\n"
        ).encode()


class Handler(BaseHTTPRequestHandler):
    app: App  # set on the subclass made by make_handler
    server_version = "kube-scale-exporter"
    protocol_version = "HTTP/1.1"
    active: Active | None = None  # the web config this request is checked against

    def setup(self):
        super().setup()
        # Headers and body go out in two writes; without this, Nagle's algorithm and the
        # scraper's delayed ACK add ~40 ms to every keep-alive scrape.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):  # route the stdlib's access log to debug
        log.debug("%s %s", self.address_string(), fmt % args)

    def _send(self, code: int, body: bytes, content_type: str, headers=()):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        configured = self.active.config.headers if self.active else ()
        for key, value in (*configured, *headers):
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):  # noqa: N802  (http.server's naming)
        path = urlsplit(self.path).path
        web = self.server.web
        # Checked per request, not per connection: a password removed from the file stops
        # working on connections that were kept alive too.
        self.active = web.current() if web else None
        if web is not None and self.active is None:
            self.close_connection = True
            self._send(503, b"web config is broken; see the exporter's log\n",
                       "text/plain; charset=utf-8")
            return
        if path != "/healthz" and not self._authorized():
            return
        if path == self.app.telemetry_path:
            self._metrics()
        elif path == "/":
            self._send(200, self.app.landing_page(), "text/html; charset=utf-8")
        elif path == "/healthz":
            self._send(200, b"ok\n", "text/plain; charset=utf-8")
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")

    do_HEAD = do_GET

    def _authorized(self) -> bool:
        """Answers 401/403 itself and returns False when the client may not go on."""
        if self.active is None:
            return True
        tls = self.active.config.tls
        peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
        if tls is not None and not tls.peer_allowed(peer):
            self._send(403, b"client certificate not allowed\n", "text/plain; charset=utf-8")
            return False
        auth = self.active.basic_auth
        if auth is not None and not auth.check(self.headers.get("Authorization")):
            self._send(401, b"unauthorized\n", "text/plain; charset=utf-8",
                       [("WWW-Authenticate", 'Basic realm="kube-scale-exporter", charset="UTF-8"')])
            return False
        return True

    def _metrics(self):
        if not self.app.try_acquire():
            self._send(503, b"too many concurrent scrapes; raise --web.max-requests\n",
                       "text/plain; charset=utf-8")
            return
        try:
            timeout = self.app.scrape_timeout(self.headers.get("X-Prometheus-Scrape-Timeout-Seconds"))
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            body = encoder(self.app.metrics(timeout))
        finally:
            self.app.release()
        headers = []
        if "gzip" in self.headers.get("Accept-Encoding", ""):
            body = gzip.compress(body, compresslevel=1)
            headers.append(("Content-Encoding", "gzip"))
        self._send(200, body, content_type, headers)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    web: LiveWebConfig | None = None

    def finish_request(self, request, client_address):
        active = self.web.current() if self.web else None
        if self.web is not None and active is None:
            return  # the web config on disk is broken (logged): refuse, never serve stale
        if active is None or active.ssl_context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(HANDSHAKE_TIMEOUT_SECONDS)
        try:
            conn = active.ssl_context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.debug("TLS handshake with %s failed: %s", client_address[0], exc)
            return
        try:
            conn.settimeout(None)
            super().finish_request(conn, client_address)
        finally:
            conn.close()


class Server6(Server):
    address_family = socket.AF_INET6


def make_server(app: App, host: str, port: int) -> Server:
    handler = type("BoundHandler", (Handler,), {"app": app})
    server_class = Server6 if ":" in host else Server
    server = server_class((host, port), handler)
    server.web = app.web
    return server
