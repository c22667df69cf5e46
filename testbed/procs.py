"""Start test servers as child processes, stop them by PID, read their memory and CPU."""

import os
import pathlib
import signal
import socket
import subprocess
import time


class Proc:
    """A server process with its log file; `stop()` kills it by PID and waits."""

    def __init__(self, argv, log_path, env=None, cwd=None):
        self.argv = list(argv)
        self.log_path = str(log_path)
        self._log = open(self.log_path, "ab")
        self.popen = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, n: int = 40) -> str:
        with open(self.log_path, "rb") as f:
            return b"".join(f.readlines()[-n:]).decode(errors="replace")

    def pause(self):
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self):
        os.kill(self.pid, signal.SIGCONT)

    def stop(self, timeout: float = 10.0):
        if self.alive():
            os.kill(self.pid, signal.SIGCONT)
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.popen.wait(timeout)
        self._log.close()


def stop_pid(pid: int, binary: str, timeout: float = 15.0) -> bool:
    """SIGTERM, then SIGKILL after `timeout`, a process started elsewhere (by an earlier
    run, another process) if it still runs `binary`: a PID can have been reused since.
    True once it has exited, as a zombie its parent has to reap or gone."""
    try:
        cmd = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return False
    if os.path.basename(cmd) != binary:
        return False  # the PID was reused by something else: not ours
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if (
                not pathlib.Path(f"/proc/{pid}").exists()
                or pathlib.Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"
            ):
                return True
            time.sleep(0.1)
    return False


def wait_for_port(
    port: int, host: str = "127.0.0.1", timeout: float = 30.0, proc: Proc | None = None
):
    """Block until something accepts on host:port; fail early if the process died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.argv[0]} exited early:\n{proc.log_tail()}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    tail = proc.log_tail() if proc is not None else ""
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s\n{tail}")


def rss_mib(pid: int) -> tuple[float, float]:
    """Resident and peak resident memory of a process, MiB."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
