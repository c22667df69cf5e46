"""The imagepull collector against a real containerd pulling from a real registry."""

import os
import signal
import socket
import threading
import time
import uuid

import pytest

from kube_scale_exporter.containerd.client import ContainerdError
from kube_scale_exporter.scrape import Scraper
from testbed.metrics import collect, sample, wait_until
from kube_scale_exporter.containerd.client import ContainerdClient
import tempfile
from testbed.containerd_server import ContainerdServer

MiB = 1 << 20


def scrape(collector):
    return collect(collector)


def value(collector, name):
    return sample(scrape(collector), name)


def wait_for(collector, predicate, timeout, what):
    """Scrape until predicate(families) holds; the families of that scrape."""
    deadline = time.monotonic() + timeout
    while True:
        families = scrape(collector)
        if predicate(families):
            return families
        if time.monotonic() > deadline:
            raise AssertionError(
                f"not {what} within {timeout}s: "
                f"{[(s.name, s.value) for f in families for s in f.samples]}"
            )
        time.sleep(0.2)


def grown(collector, first, timeout=20):
    """The families once more bytes are downloaded than in `first` (containerd writes a
    MiB at a time, and a loaded machine can hold the client back for seconds)."""
    before = sample(first, "kubescale_image_pull_downloaded_bytes")
    return wait_for(
        collector,
        lambda f: sample(f, "kubescale_image_pull_downloaded_bytes") > before,
        timeout,
        "more bytes downloaded",
    )


def wait_for_layer(collector, image, timeout):
    """Scrape until the pull of `image` (one layer) is downloading its layer: ctr writes
    the config blob beside it, so bytes can show before the layer's. Expected bytes are
    the blobs' whole sizes (the layer's, the config's while written), not bytes so far."""
    layer = image["layer_sizes"][0]
    first = wait_for(
        collector,
        lambda f: (
            sample(f, "kubescale_image_pull_downloaded_bytes") > 0
            and sample(f, "kubescale_image_pull_expected_bytes") >= layer
        ),
        timeout,
        "downloading the layer",
    )
    assert sample(first, "kubescale_image_pulls_in_progress") == 1
    assert layer <= sample(first, "kubescale_image_pull_expected_bytes") <= image["size"]
    return first


def fresh_repo():
    return "t" + uuid.uuid4().hex[:10]


@pytest.mark.integration
def test_pull_progress_moves_and_a_finished_pull_drops_out(
    containerd, registry, proxy, make_collector, workdir
):
    repo = fresh_repo()
    image = registry.push_image(repo, "v1", [16 * MiB])
    c = make_collector(containerd.address)
    assert value(c, "kubescale_image_pulls_in_progress") == 0

    fetch = containerd.fetch(f"{proxy.host}/{repo}:v1", f"{workdir}/{repo}.log")
    try:
        first = wait_for_layer(c, image, 10)
        time.sleep(1.0)
        later = grown(c, first)
        assert sample(later, "kubescale_image_pull_oldest_seconds") >= 1.0
        assert sample(later, "kubescale_image_pull_stalled") == 0
        assert fetch.popen.wait(30) == 0, fetch.log_tail()
    finally:
        fetch.stop()
    done = scrape(c)
    assert sample(done, "kubescale_image_pulls_in_progress") == 0
    assert sample(done, "kubescale_image_pull_downloaded_bytes") == 0
    assert sample(done, "kubescale_image_pull_expected_bytes") == 0
    assert sample(done, "kubescale_image_pull_oldest_seconds") == 0
    assert image["manifest"] in containerd.ctr("content", "ls", "-q").stdout


@pytest.mark.integration
def test_layers_of_one_image_count_as_one_pull(
    containerd, registry, proxy, make_collector, workdir
):
    repos = [fresh_repo(), fresh_repo()]
    for repo in repos:
        registry.push_image(repo, "v1", [8 * MiB, 8 * MiB, 8 * MiB])
    c = make_collector(containerd.address)
    fetches = [containerd.fetch(f"{proxy.host}/{r}:v1", f"{workdir}/{r}.log") for r in repos]
    try:
        # Six layers download at once (ctr fetches three per image concurrently)...
        families = wait_for(
            c,
            lambda f: sample(f, "kubescale_image_pull_expected_bytes") >= 6 * 8 * MiB,
            15,
            "six layers downloading",
        )
        # ...but they are two images.
        assert sample(families, "kubescale_image_pulls_in_progress") == 2
        for f in fetches:
            assert f.popen.wait(60) == 0, f.log_tail()
    finally:
        for f in fetches:
            f.stop()
    assert value(c, "kubescale_image_pulls_in_progress") == 0


@pytest.mark.integration
def test_killed_client_leaves_a_stalled_pull(containerd, registry, proxy, make_collector, workdir):
    repo = fresh_repo()
    registry.push_image(repo, "v1", [32 * MiB])
    c = make_collector(containerd.address, "--image-pull.stall-after", "1.5s")
    fetch = containerd.fetch(f"{proxy.host}/{repo}:v1", f"{workdir}/{repo}.log")
    try:
        wait_for(
            c,
            lambda f: sample(f, "kubescale_image_pull_downloaded_bytes") > 2 * MiB,
            10,
            "downloading",
        )
    finally:
        os.kill(fetch.pid, signal.SIGKILL)
        fetch.stop()
    killed = scrape(c)
    assert sample(killed, "kubescale_image_pulls_in_progress") == 1
    assert sample(killed, "kubescale_image_pull_stalled") == 0
    # containerd may still write what reached its socket before the client died: the
    # bytes settle after the kill returns, then stay.
    stalled = wait_for(c, lambda f: sample(f, "kubescale_image_pull_stalled") == 1, 5, "stalled")
    left = sample(stalled, "kubescale_image_pull_downloaded_bytes")
    assert 0 < sample(killed, "kubescale_image_pull_downloaded_bytes") <= left < 32 * MiB
    assert value(c, "kubescale_image_pull_downloaded_bytes") == left
    assert sample(stalled, "kubescale_image_pull_oldest_seconds") >= 1.5
    advice = c.advise(c.observe())
    assert any(f.severity == "warning" and "no progress" in f.summary for f in advice), advice


@pytest.mark.integration
def test_preload_missing_counts_absent_images(containerd, registry, proxy, make_collector, workdir):
    repo = fresh_repo()
    registry.push_image(repo, "v1", [1 * MiB])
    present = f"{proxy.host}/{repo}:v1"
    absent = f"{proxy.host}/{repo}:never-pushed"
    c = make_collector(containerd.address, "--image-pull.preload", f"{present},{absent}")
    assert value(c, "kubescale_image_preload_missing") == 2
    containerd.ctr("content", "fetch", "--plain-http", present)
    assert value(c, "kubescale_image_preload_missing") == 1
    warning = [f for f in c.advise(c.observe()) if "baked into this node" in f.summary]
    assert warning and absent in warning[0].advice and present not in warning[0].advice


@pytest.mark.integration
def test_missing_socket_fails_alone_with_a_clear_error_and_recovers(make_collector):

    path = tempfile_dir()
    server = ContainerdServer(path)
    c = make_collector(server.address)
    with pytest.raises(ContainerdError, match=f"containerd socket {server.address} does not exist"):
        scrape(c)
    scraper = Scraper([c])
    families = scraper.scrape(timeout=5).families
    assert sample(families, "kubescale_scrape_collector_success", collector="imagepull") == 0
    assert "does not exist" in scraper.last_error("imagepull")
    server.start()
    try:
        # The same collector recovers on its own.
        families = scraper.scrape(timeout=5).families
        assert sample(families, "kubescale_scrape_collector_success", collector="imagepull") == 1
        assert sample(families, "kubescale_image_pulls_in_progress") == 0
    finally:
        scraper.close()
        server.wipe()


def tempfile_dir():

    return tempfile.mkdtemp(prefix="cd-", dir="/tmp")


@pytest.mark.unit
def test_a_socket_that_is_not_containerd_fails_within_the_timeout(make_collector):
    path = os.path.join(tempfile_dir(), "silent.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(16)  # accepts (in the backlog) and never answers
    try:
        c = make_collector(path, "--containerd.timeout", "0.5s")
        start = time.monotonic()
        with pytest.raises(ContainerdError, match=f"containerd at {path} ListStatuses"):
            scrape(c)
        assert time.monotonic() - start < 2.0
    finally:
        listener.close()
        os.unlink(path)
        os.rmdir(os.path.dirname(path))


@pytest.mark.unit
def test_a_file_that_is_not_a_socket_is_named(make_collector, tmp_path):
    path = tmp_path / "plain-file"
    path.write_text("")
    c = make_collector(str(path))
    with pytest.raises(ContainerdError, match=f"{path} is not a socket"):
        scrape(c)


@pytest.mark.integration
def test_an_http1_server_socket_is_reported_as_not_grpc(containerd, make_collector):
    # containerd's own debug socket speaks HTTP/1 (pprof, expvar), not gRPC.
    c = make_collector(containerd.address + ".debug")
    with pytest.raises(ContainerdError, match=r"ListStatuses: UNAVAILABLE: .*not a gRPC server"):
        scrape(c)


@pytest.mark.integration
def test_containerd_errors_keep_their_grpc_code(containerd):

    client = ContainerdClient(containerd.address, "k8s.io", 2)
    with pytest.raises(ContainerdError, match=r"Content.List: INVALID_ARGUMENT: filters"):
        client.content('labels."unterminated')
    assert client.content('labels."containerd.io/gc.ref.content.config"') == []


@pytest.mark.integration
def test_a_hung_containerd_times_out_and_the_collector_recovers(containerd, make_collector):
    c = make_collector(containerd.address, "--containerd.timeout", "0.5s")
    scraper = Scraper([c])
    try:
        containerd.proc.pause()  # SIGSTOP: the socket accepts, nothing answers
        start = time.monotonic()
        families = scraper.scrape(timeout=5).families
        assert time.monotonic() - start < 2.0
        assert sample(families, "kubescale_scrape_collector_success", collector="imagepull") == 0
        assert "DEADLINE_EXCEEDED" in scraper.last_error("imagepull")
        containerd.proc.resume()

        # Thawed, containerd first answers what queued while it was frozen: the collector
        # recovers within seconds, not necessarily on the very next call.
        def recovered():
            families = scraper.scrape(timeout=5).families
            return sample(families, "kubescale_scrape_collector_success", collector="imagepull")

        assert wait_until(lambda: recovered() == 1, 10)
    finally:
        containerd.proc.resume()
        scraper.close()


def _answer_once(path, headers, trailers):
    """A unix socket at `path` answering one call with these HEADERS frames, as raw bytes
    (values a well-behaved h2 server would refuse to send)."""
    import h2.config  # noqa: PLC0415  (as the client: only where imagepull runs)
    import h2.connection  # noqa: PLC0415

    server = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=False, validate_outbound_headers=False)
    )
    server.initiate_connection()
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    client.send_headers(
        1,
        [(":method", "POST"), (":scheme", "http"), (":path", "/x"), (":authority", "l")],
        end_stream=True,
    )
    server.receive_data(client.data_to_send())
    server.send_headers(1, headers)
    server.send_headers(1, trailers, end_stream=True)
    reply = server.data_to_send()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def serve():
        conn, _ = listener.accept()
        with conn, listener:
            conn.sendall(reply)
            conn.shutdown(socket.SHUT_WR)
            while conn.recv(65536):
                pass

    threading.Thread(target=serve, daemon=True).start()


@pytest.mark.unit
@pytest.mark.parametrize(
    "headers,trailers,named",
    [
        (
            [(b":status", b"200")],
            [(b"grpc-status", b"abc")],
            "grpc-status b'abc' is not a status code",
        ),
        (
            [(b":status", b"200")],
            [(b"grpc-status", b"2"), (b"grpc-message", b"\xff")],
            "UNKNOWN: \ufffd",
        ),
        ([(b":status", b"\xff")], [(b"x", b"y")], "no grpc-status in the response"),
    ],
    ids=["status-not-a-number", "message-not-utf8", "http-status-not-utf8"],
)
def test_trailers_a_server_should_not_send_are_a_containerd_error(
    tmp_path, headers, trailers, named
):
    """Found by fuzz/grpc.py: a grpc-status that is not a number, or a header value that
    is not UTF-8, raised ValueError or UnicodeDecodeError out of the client, unexplained,
    instead of a ContainerdError naming the reply."""
    path = str(tmp_path / "g.sock")
    _answer_once(path, headers, trailers)
    with pytest.raises(ContainerdError, match=named):
        ContainerdClient(path, "k8s.io", 2).ingests()
