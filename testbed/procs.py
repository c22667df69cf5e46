"""Start test servers as child processes, stop them by PID, read their memory and CPU."""

import os
import pathlib
import signal
import socket
import subprocess
import time
from collections.abc import Callable

from .ports import free_port


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

    def pause(self, timeout: float = 10.0):
        """SIGSTOP, and return once every thread has stopped: the signal is asynchronous,
        and a thread busy when it is sent can still answer a request before it stops."""
        os.kill(self.pid, signal.SIGSTOP)
        wait_threads(self.pid, stopped=True, timeout=timeout)

    def resume(self, timeout: float = 10.0):
        """SIGCONT, and return once no thread is stopped any more."""
        os.kill(self.pid, signal.SIGCONT)
        wait_threads(self.pid, stopped=False, timeout=timeout)

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


def thread_states(pid: int) -> list[str]:
    """The state letter of each thread of `pid` (R, S, D, T stopped, t traced, Z...)."""
    states = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        except FileNotFoundError:  # the thread exited meanwhile
            continue
    return states


def wait_threads(pid: int, stopped: bool, timeout: float = 10.0) -> None:
    """Until every thread of `pid` is stopped (state T), or none is."""
    deadline = time.monotonic() + timeout
    while True:
        states = thread_states(pid)
        # An exiting thread (Z, X) runs no more either.
        if all(s in "TZX" for s in states) if stopped else "T" not in states:
            return
        if time.monotonic() > deadline:
            want = "stopped" if stopped else "running again"
            raise TimeoutError(f"{pid} not {want} after {timeout}s: thread states {states}")
        time.sleep(0.005)


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


class PortTaken(RuntimeError):
    """The server exited because another process had its port (found free, then taken)."""


def listening_ports(pid: int) -> set[int]:
    """The TCP ports that `pid` or one of its descendants (a wrapper's child) listens on,
    as its own network namespace sees them."""
    ports: set[int] = set()
    for member in _family(pid):
        ports |= _ports_of(member)
    return ports


def _ports_of(pid: int) -> set[int]:
    """The TCP ports `pid` itself listens on."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return set()
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:
            continue
        for row in rows:
            if row[3] == "0A" and row[9] in inodes:  # 0A: LISTEN
                ports.add(int(row[1].rsplit(":", 1)[1], 16))
    return ports


def _family(pid: int) -> list[int]:
    """`pid` and its descendants (each thread's /proc children list)."""
    family, i = [pid], 0
    while i < len(family):
        try:
            tasks = os.listdir(f"/proc/{family[i]}/task")
        except OSError:
            tasks = []
        for tid in tasks:
            try:
                with open(f"/proc/{family[i]}/task/{tid}/children") as f:
                    family.extend(int(child) for child in f.read().split())
            except OSError:
                continue
        i += 1
    return family


def wait_for_port(
    port: int, host: str = "127.0.0.1", timeout: float = 30.0, proc: Proc | None = None
):
    """Block until host:port accepts; with `proc`, until that process itself listens on
    the port (something else there, which took a port found free, does not count) and
    fail early if it dies (PortTaken when it died of the port being in use)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None:
            if not proc.alive():
                tail = proc.log_tail()
                taken = "address already in use" in tail.lower()
                error = PortTaken if taken else RuntimeError
                raise error(f"{proc.argv[0]} exited early:\n{tail}")
            if port in _ports_of(proc.pid) or port in listening_ports(proc.pid):
                return
            time.sleep(0.05)
            continue
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    tail = proc.log_tail() if proc is not None else ""
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s\n{tail}")


def start_on_free_port(
    start: Callable[[int], Proc], host: str = "127.0.0.1", timeout: float = 30.0, attempts: int = 3
) -> tuple[Proc, int]:
    """`start(port)` on a port free now, until the process it starts listens there: a
    port found free can be taken by another process before the server binds it."""
    for attempt in range(attempts):
        port = free_port(host)
        proc = start(port)
        try:
            wait_for_port(port, host=host, timeout=timeout, proc=proc)
        except PortTaken:
            proc.stop()
            if attempt == attempts - 1:
                raise
            continue
        except BaseException:
            proc.stop()
            raise
        return proc, port
    raise AssertionError("unreachable")


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
