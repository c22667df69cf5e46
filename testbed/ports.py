"""Free ports for test servers, and what waits on a port: connections not accepted yet,
bytes not read yet (what a test waits for instead of sleeping)."""

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now; the kernel picks it, so parallel tests differ."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Nothing listens on host:port (bound with SO_REUSEADDR, as Go's listeners bind:
    connections of an earlier run in TIME_WAIT do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct free ports: all bound at once, since the kernel hands a just-closed
    port out again, and two free_port() calls in a row can return the same one."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _tcp_sockets():
    """(local port, remote port, state, bytes unread) of each TCP socket of this network
    namespace, from /proc/net/tcp{,6}. For a listening socket (state 0A), the unread count
    is its accept queue: connections the kernel completed and the server has not accepted."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except FileNotFoundError:
            continue
        for row in rows:
            local, remote, state, queues = row[1], row[2], row[3], row[4]
            unread = int(queues.split(":")[1], 16)
            yield int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16), state, unread


def accept_queue(port: int) -> int:
    """Connections to `port` that its server has not accepted yet."""
    return sum(
        unread for local, _, state, unread in _tcp_sockets() if local == port and state == "0A"
    )


def unread_by_server(port: int, client_port: int) -> int | None:
    """Bytes a client (at `client_port`) sent that the server at `port` has not read; None
    when there is no such connection (not accepted by the kernel yet, or closed)."""
    for local, remote, state, unread in _tcp_sockets():
        if local == port and remote == client_port and state == "01":  # 01: ESTABLISHED
            return unread
    return None
