"""A password-guessing flood on /metrics, in a process of its own.

    python -m testbed.guessers PORT N --source 127.0.0.2,127.0.0.3 [--ca CA] [--seconds S]

N threads, each on its own keep-alive connection (TLS when --ca is given) from one of the
source addresses in turn (any 127.x.y.z is this host), send basic-auth guesses for
--user as fast as they are answered. It prints "sent" once every thread has sent its
first guess (the flood is at full strength: wait for that line, not a sleep), and at
exit (SIGTERM, or after --seconds) one JSON line: the answers counted by status code,
"error" for a connection that failed.

    flood = Guessers(port, 100, ["127.0.0.2"], ca=ca)    # returns once "sent" is printed
    ...                                                  # the scrapes to time meanwhile
    counts = flood.stop()                                # {"401": 812, "503": 20431}
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import signal
import ssl
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Bounds the flood's life whatever its caller does.
MAX_SECONDS = 300.0


class Guessers:
    """The flood as a child process; the constructor returns once it is at full strength."""

    def __init__(
        self,
        port: int,
        n: int,
        sources: Sequence[str],
        ca: str | None = None,
        user: str = "prometheus",
        seconds: float = MAX_SECONDS,
    ):
        argv = [sys.executable, "-m", "testbed.guessers", str(port), str(n)]
        argv += ["--source", ",".join(sources), "--user", user, "--seconds", str(seconds)]
        argv += ["--ca", ca] if ca else []
        self._popen = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        line = self._popen.stdout.readline()
        if line.strip() != "sent":
            self._popen.kill()
            self._popen.wait()
            raise RuntimeError(f"the guessers did not start: {line!r}")

    def stop(self) -> dict[str, int]:
        """Stop the flood; its answers counted by status code."""
        self._popen.terminate()
        out, _ = self._popen.communicate(timeout=60)
        return json.loads(out.strip().splitlines()[-1])


def _guess(
    port: int, source: str, context: ssl.SSLContext | None, user: str, index: int, shared
) -> None:
    stop, counts, lock, sent = shared
    conn = None
    attempt = 0
    while not stop.is_set():
        if conn is None:
            conn = (
                http.client.HTTPSConnection(
                    "127.0.0.1", port, source_address=(source, 0), context=context, timeout=30
                )
                if context
                else http.client.HTTPConnection(
                    "127.0.0.1", port, source_address=(source, 0), timeout=30
                )
            )
        attempt += 1
        credentials = base64.b64encode(f"{user}:guess-{index}-{attempt}".encode()).decode()
        try:
            conn.request("GET", "/metrics", headers={"Authorization": "Basic " + credentials})
            if attempt == 1:
                sent.release()
            response = conn.getresponse()
            response.read()
            status = str(response.status)
            if response.will_close:
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException):
            if attempt == 1:
                sent.release()
            status = "error"
            conn.close()
            conn = None
        with lock:
            counts[status] += 1
    if conn is not None:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port", type=int)
    parser.add_argument("n", type=int)
    parser.add_argument("--source", default="127.0.0.2")
    parser.add_argument("--ca")
    parser.add_argument("--user", default="prometheus")
    parser.add_argument("--seconds", type=float, default=MAX_SECONDS)
    args = parser.parse_args()
    context = ssl.create_default_context(cafile=args.ca) if args.ca else None
    sources = args.source.split(",")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    counts: Counter[str] = Counter()
    sent = threading.Semaphore(0)
    lock = threading.Lock()
    shared = (stop, counts, lock, sent)
    threads = [
        threading.Thread(
            target=_guess,
            args=(args.port, sources[i % len(sources)], context, args.user, i, shared),
            daemon=True,
        )
        for i in range(args.n)
    ]
    for t in threads:
        t.start()
    for _ in threads:
        sent.acquire()
    print("sent", flush=True)
    stop.wait(min(args.seconds, MAX_SECONDS))
    stop.set()
    for t in threads:
        t.join(35)
    with lock:
        print(json.dumps(dict(counts)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
