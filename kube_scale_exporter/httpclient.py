"""The backends' HTTP/1.1 client, on the standard library (http.client, ssl).

The Kubernetes API (kube/client.py) and etcd's JSON gateway (etcd/client.py) are asked
through it. A `Client` keeps connections alive per host; every request has a connect
timeout, a timeout per read and, inside `limits.deadline()`, a total deadline (each
socket is handed to its watchdog as soon as it exists, before the TLS handshake). A
reply is read as it arrives, `read1()` at a time (gzip decoded in pieces of at most the
size asked, so a bomb costs what the reader's cap allows); the caps themselves are the
readers' of limits.py. Failures raise `TransportError` naming the URL (scheme, host,
path), never a header sent: a token stays out of every message.

Why not requests: the node pod's pod watch needs GET, a streamed watch and a POST, and
requests with urllib3, charset_normalizer and idna cost every node pod 6.5 MiB of RSS
(docs/sizing.md).
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
import zlib
from urllib.parse import urlencode, urlsplit

from kube_scale_exporter import limits

# Idle kept-alive connections per host: one per thread that asks at once is plenty (the
# informers of a collector, the etcd fan-out's members each have their own host).
IDLE_PER_HOST = 8
# What a message shows of what a server sent (a bad status line, say).
SHOWN = 200


class TransportError(Exception):
    """No complete HTTP answer: connect, TLS, protocol or read failure. The message is
    "URL: KIND: what happened", KIND one of ConnectionError, ConnectTimeout, ReadTimeout,
    SSLError or Timeout (the names requests gave them, which error texts keep)."""


class ReadTimeout(TransportError):
    """A read waited longer than its timeout for the next bytes."""


class TLSError(TransportError):
    """The TLS handshake failed (an untrusted certificate, a wrong name, a refused client
    certificate)."""


class Timeout(TransportError):
    """The total deadline of `limits.deadline()` passed before the answer was complete."""


def tls_context(verify, cert=None) -> ssl.SSLContext:
    """A client context: `verify` a CA bundle path, True (the system's CAs) or False (no
    verification); `cert` a (certificate, key) pair of paths or None."""
    if verify is False:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context(cafile=None if verify is True else verify)
    if cert is not None:
        context.load_cert_chain(*cert)
    return context


class _Connection(http.client.HTTPConnection):
    """One kept-alive connection; TLS when given a context factory (called per connect,
    so that rotated certificate files are read on the next connection)."""

    def __init__(self, host, port, tls):
        super().__init__(host, port)
        self._tls = tls

    def connect(self):
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = sock  # close() closes it whatever fails below
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None:
            sock = self._tls().wrap_socket(
                sock, server_hostname=self.host, do_handshake_on_connect=False
            )
            self.sock = sock
        # Before the handshake: a server dripping it is cut at the deadline too.
        limits.arm(sock)
        if self._tls is not None:
            sock.do_handshake()


def _dropped(sock) -> bool:
    """An idle connection that is readable was closed by the server (or sent what it
    should not have): either way it is not reused."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class Client:
    """Requests to any number of hosts, each with its pool of idle connections; safe to
    share between threads. `tls()` gives the context of each new HTTPS connection;
    `headers` go with every request."""

    def __init__(self, tls=None, headers=None):
        self._tls = tls or (lambda: tls_context(True))
        self.headers = {
            "Accept-Encoding": "gzip",
            "User-Agent": "kube-scale-exporter",
            **(headers or {}),
        }
        self._lock = threading.Lock()
        self._idle: dict[tuple, list[_Connection]] = {}

    def request(self, method, url, *, timeout, params=None, body=None, headers=None) -> Response:
        """Send one request and read the status line and headers; the body is the
        Response's to read. `timeout` is seconds or (connect, read) seconds; `params` are
        added to the query (None values left out)."""
        connect_timeout, read_timeout = timeout if isinstance(timeout, tuple) else (timeout,) * 2
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
        where = origin + parts.path
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _broken(where, "not an http or https URL")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise _broken(where, "not a valid port") from None
        added = urlencode({k: v for k, v in (params or {}).items() if v is not None})
        query = "&".join(q for q in (parts.query, added) if q)
        target = (parts.path or "/") + ("?" + query if query else "")
        key = (parts.scheme, parts.hostname, port)
        sent = {**self.headers, **(headers or {})}
        for attempt in (0, 1):
            conn = self._take(key)
            reused = conn.sock is not None
            try:
                if reused:
                    limits.arm(conn.sock)
                else:
                    conn.timeout = connect_timeout
                    try:
                        conn.connect()
                    except TimeoutError:
                        raise TransportError(
                            f"{where}: ConnectTimeout: no connection within {connect_timeout:g}s"
                        ) from None
                sock = conn.sock  # getresponse() drops it from conn when the server closes
                sock.settimeout(read_timeout)
                conn.request(method, target, body=body, headers=sent)
                raw = conn.getresponse()
            except Exception as exc:  # noqa: BLE001  (each kind is named by _failure)
                conn.close()
                stale = isinstance(exc, (ConnectionResetError, BrokenPipeError))
                if reused and stale and attempt == 0 and not _expired():
                    continue  # the server closed the idle connection as we sent: a new one
                raise _failure(where, exc, "no answer", read_timeout) from None
            return Response(self, key, conn, sock, raw, where, read_timeout)
        raise AssertionError("unreachable")

    def _take(self, key) -> _Connection:
        with self._lock:
            idle = self._idle.get(key, [])
            while idle:
                conn = idle.pop()
                if not _dropped(conn.sock):
                    return conn
                conn.close()
        scheme, host, port = key
        return _Connection(host, port, self._tls if scheme == "https" else None)

    def _give_back(self, key, conn) -> None:
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) < IDLE_PER_HOST:
                idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            conns = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for conn in conns:
            conn.close()


def _expired() -> bool:
    current = limits.current()
    return current is not None and current.expired()


def _broken(where, what) -> TransportError:
    return TransportError(f"{where}: ConnectionError: {what}")


def _failure(where, exc, doing, read_timeout) -> TransportError:
    """The TransportError for `exc`, raised while `doing` something with `where`."""
    if isinstance(exc, TransportError):
        return exc
    if _expired():
        return Timeout(f"{where}: Timeout: no complete reply within {limits.current().seconds:g}s")
    if isinstance(exc, TimeoutError):
        return ReadTimeout(f"{where}: ReadTimeout: {doing} within {read_timeout:g}s")
    if isinstance(exc, ssl.SSLError):
        return TLSError(f"{where}: SSLError: {str(exc)[:SHOWN]}")
    return _broken(where, str(exc)[:SHOWN] or type(exc).__name__)


class Response:
    """A reply whose status and headers are in; its body is read with read1(). Close it
    (or use it as a context manager): a body read to its end gives the connection back
    for the next request, anything else closes it."""

    def __init__(self, client, key, conn, sock, raw, url, read_timeout):
        self.status = raw.status
        self.headers = raw.headers  # case-insensitive .get()
        self.url = url
        self._client, self._key, self._conn, self._raw = client, key, conn, raw
        self._sock = sock
        self._read_timeout = read_timeout
        encoding = raw.headers.get("Content-Encoding", "").strip().lower()
        self._gzip = zlib.decompressobj(16 + zlib.MAX_WBITS) if encoding == "gzip" else None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def read1(self, n=limits.CHUNK) -> bytes:
        """Up to `n` bytes of the decoded body, as soon as some are in; b"" at its end."""
        if _expired():
            seconds = limits.current().seconds
            raise Timeout(f"{self.url}: Timeout: no complete reply within {seconds:g}s")
        try:
            return self._raw_read1(n) if self._gzip is None else self._gunzip1(n)
        except (OSError, http.client.HTTPException, zlib.error, ValueError, AttributeError) as exc:
            # ValueError, AttributeError: the reply closed by another thread (interrupt()).
            raise _failure(self.url, exc, "no more of the reply", self._read_timeout) from None

    def _raw_read1(self, n) -> bytes:
        data = self._raw.read1(n)
        if not data and self._raw.length:
            raise _broken(
                self.url,
                f"the connection closed {self._raw.length} bytes before the "
                "end of the reply (its Content-Length)",
            )
        return data

    def _gunzip1(self, n) -> bytes:
        while True:
            decoder = self._gzip
            if decoder.eof:
                # A gzip body may be several members in a row (RFC 1952, 2.2): kube-apiserver
                # 1.37 compresses each burst of watch events as a member of its own.
                data = decoder.unused_data or self._raw_read1(n)
                if not data:
                    return b""
                decoder = self._gzip = zlib.decompressobj(16 + zlib.MAX_WBITS)
            else:
                data = decoder.unconsumed_tail or self._raw_read1(n)
                if not data:
                    raise _broken(self.url, "the reply ends inside its gzip stream")
            out = decoder.decompress(data, n)
            if out:
                return out

    def interrupt(self) -> None:
        """End a read blocked in another thread (a watch being stopped). The plain
        socket's shutdown, also for TLS: SSLSocket.shutdown would drop its SSL object
        under the thread still reading it. Nothing once closed: the connection may serve
        another request by then."""
        if self._conn is None:
            return
        try:
            socket.socket.shutdown(self._sock, socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        raw = self._raw
        complete = raw.isclosed() or (not raw.chunked and raw.length == 0)
        raw.close()
        if complete and not raw.will_close and conn.sock is not None:
            self._client._give_back(self._key, conn)
        else:
            conn.close()
