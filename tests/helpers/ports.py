"""Free loopback ports for test servers."""
import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now; the kernel picks it, so parallel tests differ."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True
