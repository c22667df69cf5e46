"""Hostile containerd responses by size, item count and pace, under a real exporter.

A gRPC server on the containerd socket path (testbed/hostile_grpc.py) answers sanely,
then one method at a time with a response of 63 MiB (under the old 64 MiB cap, which
took RSS to 0.8-1.2 GB), one with no end, a million tiny items, or a drip. Each time
imagepull reports success 0 with an error naming the cap, recovers once the answers are
sane again, and the exporter's peak RSS (VmHWM) stays within a few MiB of where it was:
list calls read one item at a time as the response arrives. Growth measured on the
project's 2-core machine under load (docs/reliability.md): 63MiB-message +2.6 MiB,
endless +4.4, million-items +3.4, 63MiB-images +0.9 (+20.3 when Images.List was held
whole), 16MiB-images-message +1.2 (was +32.2), 8MiB-image +4.3; SLACK_MIB leaves room
for scrapes and thread stacks on a loaded machine.
"""

import threading
import time

import pytest

from kube_scale_exporter.containerd.client import IMAGES_BYTES, LIST_IMAGES, LIST_STATUSES
from testbed.hostile_grpc import HostileGrpc, endless, frame, repeat
from testbed.procs import rss_mib

pytestmark = pytest.mark.integration

SLACK_MIB = 6.0


def wire_len(n):
    """A protobuf varint."""
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out) + bytes([n])


# One ListStatuses item: a Status whose ref is "x" (5 bytes on the wire).
TINY = b"\x0a\x03\x1a\x01x"
# One ListStatuses item of ~100 bytes: 1 MiB of them stays under MAX_ITEMS.
STATUS = b"\x0a\x66\x1a\x64" + b"layer-sha256:" + b"0" * 87


@pytest.fixture
def server(workdir):
    grpc = HostileGrpc(f"{workdir}/cd.sock").start()
    yield grpc
    grpc.stop()


def imagepull_exporter(run_exporter, server, timeout):
    running = run_exporter(
        [
            "--mode",
            "node",
            "--collector.disable-defaults",
            "--collector.imagepull",
            "--containerd.address",
            server.path,
            "--containerd.timeout",
            timeout,
            "--image-pull.preload",
            "registry.example/app:1",
        ]
    )
    running.wait_for(lambda s: s.success.get("imagepull") == 1, within=10)
    for _ in range(5):
        running.scrape()
    return running


@pytest.fixture
def exporter(server, run_exporter):
    return imagepull_exporter(run_exporter, server, "1s")


@pytest.fixture
def patient_exporter(server, run_exporter):
    """Time to read a response up to its cap: on the loaded 2-core machine 16 MiB of
    images took longer than 1 s, and the call ended at its deadline, not at the cap.
    Within the scrapes' 3 s all the same."""
    return imagepull_exporter(run_exporter, server, "2.5s")


def peak(exporter):
    return rss_mib(exporter.proc.pid)[1]


def fails_naming(exporter, words):
    failed = exporter.wait_for(lambda s: s.success.get("imagepull") == 0, within=10)
    exporter.wait_for(lambda s: words in exporter.proc.log_tail(200), within=5)
    return failed


def hold(exporter, seconds=3.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        scrape = exporter.scrape()
        assert scrape.status == 200 and scrape.seconds < 3.5
        assert scrape.success.get("imagepull") == 0


def recovers(exporter, server):
    server.answers.clear()
    exporter.wait_for(lambda s: s.success.get("imagepull") == 1, within=10)


CASES = {
    # One 63 MiB message of tiny items: refused at its length prefix.
    "63MiB-message": (
        LIST_STATUSES,
        dict(chunks=lambda: repeat(TINY, 63 << 20), length=(63 << 20) // 5 * 5),
        "STATUSES_BYTES",
        0,
    ),
    # Messages of 64 KiB for ever: refused at the cap.
    "endless": (
        LIST_STATUSES,
        dict(chunks=lambda: endless(frame(STATUS * 600))),
        "STATUSES_BYTES",
        1,
    ),
    # 1 MiB of 5-byte items, under the byte cap: 200,000 items, refused at MAX_ITEMS.
    "million-items": (LIST_STATUSES, dict(messages=[TINY * 200_000]), "MAX_ITEMS", 0),
    # Images.List of 63 MiB in 64 KiB messages of 1 KB images: read one image at a time
    # (only the names asked about kept), refused at its byte cap.
    "63MiB-images": (
        LIST_IMAGES,
        dict(chunks=lambda: repeat(frame(IMAGE * 64), 63 << 20)),
        "IMAGES_BYTES",
        0,
    ),
    # One 16 MiB message of 5-byte images: read as it arrives, refused at MAX_ITEMS.
    "16MiB-images-message": (
        LIST_IMAGES,
        dict(
            chunks=lambda: repeat(TINY_IMAGE, IMAGES_BYTES - 5), length=(IMAGES_BYTES - 5) // 5 * 5
        ),
        "MAX_ITEMS",
        0,
    ),
    # One image announced at 8 MiB: refused at its length, before any of it is kept.
    "8MiB-image": (
        LIST_IMAGES,
        dict(chunks=lambda: repeat(b"\x0a\x80\x80\x80\x04" + b"x" * 4091, 8 << 20), length=8 << 20),
        "MAX_ITEM_BYTES",
        0,
    ),
}
TINY_IMAGE = b"\x0a\x03\x0a\x01x"
# One Image: a name of ~1,000 bytes (field 1 of the Image in field 1 of the reply).
NAME = b"registry.example/" + b"x" * 990
IMAGE = b"\x0a" + wire_len(2 + len(NAME) + 1) + b"\x0a" + wire_len(len(NAME)) + NAME


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_response_costs_at_most_its_cap(patient_exporter, server, case):
    exporter = patient_exporter
    method, answer, cap, allowed_mib = CASES[case]
    before = peak(exporter)
    server.answer(method, **answer)
    fails_naming(exporter, cap)
    hold(exporter)
    grew = peak(exporter) - before
    print(f"containerd {case}: peak +{grew:.1f} MiB")
    assert grew < allowed_mib + SLACK_MIB
    recovers(exporter, server)


def test_a_dripping_response_ends_at_the_timeout(exporter, server):
    def drip():
        while True:
            yield b"\x00"
            time.sleep(0.3)

    server.answer(LIST_STATUSES, chunks=drip)
    failed = fails_naming(exporter, "DEADLINE_EXCEEDED")
    assert failed.seconds < 2.0  # --containerd.timeout 1s bounds the call in all
    recovers(exporter, server)


def test_hostile_server_threads_do_not_pile_up(exporter, server):
    # The hostile server runs in this process, beside whatever daemon threads earlier tests
    # of the session left: count what this test adds, not the session's total.
    before = threading.active_count()
    server.answer(LIST_STATUSES, chunks=lambda: endless(frame(STATUS * 600)))
    fails_naming(exporter, "STATUSES_BYTES")
    hold(exporter)
    threads = int(open(f"/proc/{exporter.proc.pid}/status").read().split("Threads:")[1].split()[0])
    added = threading.active_count() - before
    assert threads < 30 and added < 30, (threads, added)
    recovers(exporter, server)
