"""Many idle client connections at once, and what the server holds meanwhile.

    socks, seconds = open_idle(port, 5000)                 # TCP, connects all started at once
    socks, seconds = open_idle(port, 5000, ssl_context)    # then every TLS handshake done
    close_all(socks)

The caller's own open-files limit must allow n sockets: raise_own_nofile() lifts the
soft limit to the hard one.
"""

import os
import resource
import selectors
import socket
import ssl
import struct
import time


def raise_own_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def open_idle(
    port: int,
    n: int,
    context: ssl.SSLContext | None = None,
    host: str = "127.0.0.1",
    timeout: float = 120.0,
    source: str | None = None,
) -> tuple[list, float]:
    """n connections that then say nothing; returns those that came up and the seconds
    it took. Connects (and handshakes) run concurrently, as an attacker's would.
    `source`: the local address to connect from (any 127.x.y.z is this host)."""
    sel = selectors.DefaultSelector()
    started = time.monotonic()
    for _ in range(n):
        s = socket.socket()
        if source:
            s.bind((source, 0))
        s.setblocking(False)
        s.connect_ex((host, port))
        sel.register(s, selectors.EVENT_WRITE, "connect")
    up = []
    while sel.get_map() and time.monotonic() - started < timeout:
        for key, _ in sel.select(1.0):
            s = key.fileobj
            if key.data == "connect":
                sel.unregister(s)
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                    s.close()
                    continue
                if context is None:
                    up.append(s)
                    continue
                s = context.wrap_socket(s, server_hostname=host, do_handshake_on_connect=False)
                sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE, "tls")
            _handshake(sel, s, up)
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    sel.close()
    return up, time.monotonic() - started


def _handshake(sel, tls: ssl.SSLSocket, up: list) -> None:
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        sel.modify(tls, selectors.EVENT_READ, "tls")
        return
    except ssl.SSLWantWriteError:
        sel.modify(tls, selectors.EVENT_WRITE, "tls")
        return
    except OSError:
        sel.unregister(tls)
        tls.close()
        return
    sel.unregister(tls)
    up.append(tls)


def close_all(socks) -> None:
    """Reset them, as a flood would: thousands of closes leave no TIME_WAIT behind to run
    the host's ephemeral ports out for the tests that follow."""
    for s in socks:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass  # already closed
        s.close()


def closed_by_server(socks, wait: float) -> int:
    """How many of `socks` the server has closed (EOF or reset) within `wait` seconds."""
    sel = selectors.DefaultSelector()
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    closed = 0
    deadline = time.monotonic() + wait
    while sel.get_map() and time.monotonic() < deadline:
        for key, _ in sel.select(max(0.0, min(1.0, deadline - time.monotonic()))):
            if _at_eof(key.fileobj):  # else TLS bookkeeping (session tickets): keep waiting
                sel.unregister(key.fileobj)
                closed += 1
    sel.close()
    return closed


def _at_eof(s) -> bool:
    try:
        while True:
            if not s.recv(65536):
                return True
    except (ssl.SSLWantReadError, BlockingIOError):
        return False  # data, not a close (this server sends nothing unasked)
    except OSError:
        return True


def server_sockets(pid: int) -> int:
    """Sockets a process holds open (listeners and internal ones included)."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return count


def threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


def churn(
    port: int,
    n: int,
    seconds: float,
    context: ssl.SSLContext | None = None,
    source: str | None = None,
) -> int:
    """Open n connections at once, close them, again, for `seconds`; connections made."""
    made = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        socks, _ = open_idle(
            port, n, context, timeout=max(0.5, deadline - time.monotonic()), source=source
        )
        made += len(socks)
        close_all(socks)
    return made


if __name__ == "__main__":
    # python -m testbed.idle PORT N SECONDS [--ca CA] [--source ADDRESS]: churn connections
    # from another process; prints how many were made.
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("n", type=int)
    parser.add_argument("seconds", type=float)
    parser.add_argument("--ca")
    parser.add_argument("--source")
    args = parser.parse_args()
    raise_own_nofile()
    ctx = ssl.create_default_context(cafile=args.ca) if args.ca else None
    print(churn(args.port, args.n, args.seconds, ctx, args.source), flush=True)
