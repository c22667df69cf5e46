"""Free ports for test servers."""

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
