"""limit_malloc_arenas: however many threads allocate, glibc keeps at most MALLOC_ARENAS.

Counted by glibc itself (malloc_info's <heap> entries) in a fresh process, where eight
threads allocate at once, with and without the limit set first.
"""

import subprocess
import sys
from pathlib import Path

import pytest

from kube_scale_exporter.cli import MALLOC_ARENAS

# Each count needs a fresh process: arenas are per process and the limit precedes threads.
pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ARENAS_AFTER_THREADS = """\
import ctypes, os, re, sys, tempfile, threading
if sys.argv[1] == "limit":
    from kube_scale_exporter.cli import limit_malloc_arenas
    limit_malloc_arenas()
together = threading.Barrier(8)
def allocate():
    together.wait()
    kept = [bytearray(2000) for _ in range(2000)]
    del kept
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
fd, path = tempfile.mkstemp()
os.close(fd)
out = ctypes.c_void_p(libc.fopen(path.encode(), b"w"))
libc.malloc_info(0, out)
libc.fclose(out)
print(len(re.findall(r'<heap nr="[0-9]+">', open(path).read())))
os.unlink(path)
"""


def arenas(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", ARENAS_AFTER_THREADS, mode],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return int(done.stdout)


def test_threads_share_at_most_the_limits_arenas():
    assert arenas("limit") <= MALLOC_ARENAS


def test_without_the_limit_the_same_threads_take_more():
    """The probe can tell: the same eight threads, unlimited, get arenas of their own."""
    assert arenas("none") > MALLOC_ARENAS
