"""--web.kube-rbac against the real kube-apiserver: TokenReview, SubjectAccessReview, the
verdict cache, and a flood of bad tokens beside a legitimate scraper."""

import ast
import collections
import contextlib
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time

import pytest
import requests
import yaml

from kube_scale_exporter import httpclient, kube
from kube_scale_exporter.web.routes import App, make_server
from kube_scale_exporter.kube.client import KubeClient, ReplyTooLarge
from kube_scale_exporter.kube.config import KubeConfig
from kube_scale_exporter.scrape import Scraper
from kube_scale_exporter.web import kuberbac
from kube_scale_exporter.web.kuberbac import KubeRBAC
from testbed.metrics import wait_until
from tests.conftest import Scripted

# What deploy/components/kube-rbac grants the exporter, and what users bind to Prometheus.
REVIEWER = list(kuberbac.RBAC_RULES)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
METRICS_READER = [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


def token_of(kubeconfig):
    with open(kubeconfig) as f:
        return yaml.safe_load(f)["users"][0]["user"]["token"]


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def accounts(kubeconfig_for):
    """(exporter's kubeconfig, allowed token, authenticated-but-not-allowed token)."""
    exporter = kubeconfig_for("exporter", REVIEWER)
    allowed = token_of(kubeconfig_for("prometheus", METRICS_READER))
    # A role without the non-resource URL: authenticated, not authorized.
    other = token_of(
        kubeconfig_for("other", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}])
    )
    return exporter, allowed, other


@pytest.fixture
def serve_rbac():
    servers = []

    def start(scripted_collectors, kubeconfig, max_requests=40, open_=False, **kw):
        rbac = None if open_ else KubeRBAC(kube.KubeClient(kube.load(kubeconfig)), "/metrics", **kw)
        app = App(Scraper(scripted_collectors), "/metrics", 5.0, max_requests, kube_rbac=rbac)
        server = make_server(app, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}", rbac

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def token_reviews(apiserver):
    return apiserver.metric_sum("apiserver_request_total", resource="tokenreviews")


@pytest.mark.integration
def test_the_exporter_process_answers_200_401_403(apiserver, accounts, start_exporter):
    """The CLI's wiring: --web.kube-rbac with --kube.kubeconfig, in a real process."""
    kubeconfig, allowed, other = accounts
    exp = start_exporter(scheme="http", flags=("--web.kube-rbac", "--kube.kubeconfig", kubeconfig))
    url = exp.url + "/metrics"
    assert requests.get(exp.url + "/healthz", timeout=10).status_code == 200
    none = requests.get(url, timeout=10)
    assert none.status_code == 401
    assert none.headers["WWW-Authenticate"].startswith("Bearer")
    assert requests.get(url, headers=bearer("not-a-token"), timeout=10).status_code == 401
    assert requests.get(url, headers=bearer(other), timeout=10).status_code == 403
    ok = requests.get(url, headers=bearer(allowed), timeout=10)
    assert ok.status_code == 200, ok.text
    assert requests.get(exp.url + "/", timeout=10).status_code == 401
    assert requests.get(exp.url + "/", headers=bearer(allowed), timeout=10).status_code == 200


@pytest.mark.integration
def test_basic_auth_and_kube_rbac_exclude_each_other(run_exporter, tmp_path, password):
    config = tmp_path / "web.yml"
    config.write_text(f"basic_auth_users:\n  prometheus: {password[1]}\n")
    result = run_exporter("--web.kube-rbac", "--web.config.file", str(config))
    assert result.returncode == 2
    assert "--web.kube-rbac" in result.stderr


@pytest.mark.integration
def test_api_server_unreachable_is_503_and_cached_grants_stand(
    apiserver, accounts, scripted, serve_rbac, tmp_path
):
    kubeconfig, allowed, _ = accounts
    url, rbac = serve_rbac([scripted("a")], kubeconfig)
    assert requests.get(url + "/metrics", headers=bearer(allowed), timeout=10).status_code == 200
    # Point the client at a closed port: the API server is gone.
    rbac.client.config.server = "https://127.0.0.1:1"
    fresh = requests.get(url + "/metrics", headers=bearer("unknown-token"), timeout=10)
    assert fresh.status_code == 503
    assert requests.get(url + "/metrics", headers=bearer(allowed), timeout=10).status_code == 200


@pytest.mark.integration
def test_the_cache_bounds_token_reviews(apiserver, accounts, scripted, serve_rbac):
    kubeconfig, allowed, other = accounts
    url, rbac = serve_rbac([scripted("a")], kubeconfig)
    before = token_reviews(apiserver)
    session = requests.Session()
    codes = {}
    started = time.monotonic()
    while time.monotonic() - started < 3.0:
        for token in (allowed, other, "bad-token"):
            code = session.get(url + "/metrics", headers=bearer(token), timeout=10).status_code
            codes.setdefault(token, set()).add(code)
    elapsed = time.monotonic() - started
    seen = token_reviews(apiserver) - before
    print(f"3 tokens for {elapsed:.1f}s: {seen:g} TokenReviews at the API server")
    assert codes == {allowed: {200}, other: {403}, "bad-token": {401}}
    # One review per token (refusals cached 5 s): 3, whatever the number of requests.
    assert seen == rbac.reviews == 3


# N clients, each a keep-alive session sending a new random token on every request, in
# a process of their own (in ours they would share the server's GIL); prints "flooding"
# once every client has had an answer, and the count of each status when stdin closes.
FLOOD = """
import collections, secrets, sys, threading, time, requests
url, n = sys.argv[1], int(sys.argv[2])
began = time.monotonic()
codes, stop, answered = collections.Counter(), threading.Event(), threading.Semaphore(0)
def flood():
    s = requests.Session()
    s.trust_env = False
    first = True
    while not stop.is_set():
        try:
            code = s.get(url, headers={"Authorization": "Bearer " + secrets.token_hex(24)},
                         timeout=10).status_code
        except requests.RequestException:
            code = "error"
        codes[code] += 1
        if first:
            answered.release()
            first = False
threads = [threading.Thread(target=flood, daemon=True) for _ in range(n)]
for t in threads:
    t.start()
for t in threads:
    answered.acquire()
print("flooding", flush=True)
sys.stdin.read()
stop.set()
for t in threads:
    t.join(15)
print(time.monotonic() - began)
print(dict(codes))
"""


class Slow(Scripted):
    """A scrape that takes 50 ms, as a real one does: a slot is held that long."""

    def observe(self):
        time.sleep(0.05)
        return super().observe()


@pytest.mark.integration
@pytest.mark.parametrize("rbac", [True, False], ids=["kube-rbac", "open"])
def test_a_flood_of_bad_tokens_does_not_delay_the_good_scraper(
    apiserver, accounts, serve_rbac, rbac
):
    """120 clients with bad tokens beside one scraper, 4 scrape slots. Open (no
    --web.kube-rbac), the flood takes the slots and the scraper gets 503s.
    With it, the flood never reaches a slot and the scraper gets every scrape."""
    kubeconfig, allowed, _ = accounts
    url, _ = serve_rbac([Slow("a")], kubeconfig, max_requests=4, open_=not rbac)
    good = requests.Session()
    statuses = []

    def scrape_times(n):
        times = []
        for _ in range(n):
            t = time.monotonic()
            r = good.get(url + "/metrics", headers=bearer(allowed), timeout=10)
            times.append(time.monotonic() - t)
            statuses.append(r.status_code)
            time.sleep(0.05)
        return times

    scrape_times(2)  # cached from here on
    quiet = scrape_times(30)
    assert set(statuses) == {200}
    statuses.clear()
    before = token_reviews(apiserver)
    flood_start = time.monotonic()
    flood = subprocess.Popen(
        [sys.executable, "-c", FLOOD, url + "/metrics", "120"],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert flood.stdout.readline().strip() == "flooding"  # every client is at it
        loud = scrape_times(30)
        flood_seconds = time.monotonic() - flood_start
        out, _ = flood.communicate("", timeout=30)
    finally:
        flood.kill()
    reviews = token_reviews(apiserver) - before
    *_, elapsed, last = out.strip().splitlines()
    codes, flood_lasted = ast.literal_eval(last), float(elapsed)
    report = (
        f"good scraper: quiet p50 {statistics.median(quiet) * 1000:.1f} ms "
        f"max {max(quiet) * 1000:.1f} ms; beside 120 bad-token clients p50 "
        f"{statistics.median(loud) * 1000:.1f} ms max {max(loud) * 1000:.1f} ms; "
        f"flood answers {codes} in {flood_seconds:.1f}s; {reviews:g} TokenReviews "
        f"({reviews / flood_seconds:.1f}/s; the flood process ran {flood_lasted:.1f}s)"
    )
    report += f"; good scraper answers {dict(collections.Counter(statuses))}"
    print(("kube-rbac: " if rbac else "open: ") + report)
    if not rbac:
        assert 503 in statuses, report  # the starvation --web.kube-rbac prevents
        return
    assert set(codes) <= {401, 429}, report
    # Every good scrape answered 200, none slowed past 0.5 s.
    assert set(statuses) == {200}, report
    assert max(loud) < 0.5, report
    # Reviews of unknown tokens are rate-bounded: 20/s after a burst of 20, over the whole
    # life of the flood process (on a loaded machine it takes seconds to stop its clients).
    rate = kuberbac.REVIEWS_PER_SECOND
    assert reviews <= rate * flood_lasted + rate + 5, report


# --- the verdict cache, with a scripted API server -----------------------------------


class FakeClient:
    def __init__(self, allowed=(), authenticated=(), fail=False):
        self.allowed, self.authenticated, self.fail = set(allowed), set(authenticated), fail
        self.calls = []
        self.gate = None
        self.entered = 0  # calls begun, those held at the gate too

    def create(self, path, obj, timeout=None):
        self.entered += 1
        if self.gate is not None:
            self.gate.wait(5)
        if self.fail:
            raise httpclient.TransportError("https://10.0.0.1:6443/apis: no route")
        self.calls.append(path)
        if path == kuberbac.TOKEN_REVIEWS:
            token = obj["spec"]["token"]
            ok = token in self.authenticated | self.allowed
            return {"status": {"authenticated": ok, "user": {"username": token, "groups": ["g"]}}}
        spec = obj["spec"]
        assert spec["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
        assert spec["groups"] == ["g"]
        return {"status": {"allowed": spec["user"] in self.allowed}}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def granted():
    """A scripted API server, a clock and a KubeRBAC (TTL 60 s) that has just granted
    the token "good"."""
    client, clock = FakeClient(allowed={"good"}), Clock()
    rbac = KubeRBAC(client, ttl=60, reviews_per_second=1000, clock=clock)
    assert rbac.check("Bearer good") == kuberbac.ALLOWED
    return client, clock, rbac


@pytest.mark.unit
def test_verdicts_expire_allowed_after_the_ttl_refusals_after_5s():
    client, clock = FakeClient(allowed={"good"}, authenticated={"meh"}), Clock()
    rbac = KubeRBAC(client, ttl=60, clock=clock)
    for _ in range(3):
        assert rbac.check("Bearer good") == kuberbac.ALLOWED
        assert rbac.check("Bearer meh") == kuberbac.FORBIDDEN
        assert rbac.check("Bearer bad") == kuberbac.UNAUTHENTICATED
    assert rbac.check("") == rbac.check("Basic Zm9vOmJhcg==") == kuberbac.UNAUTHENTICATED
    assert rbac.reviews == 3
    clock.now += 5.1
    rbac.check("Bearer bad")
    rbac.check("Bearer good")
    assert rbac.reviews == 4
    clock.now += 30
    assert rbac.check("Bearer good") == kuberbac.ALLOWED  # past half its TTL: reviewed again
    assert wait_until(lambda: rbac.reviews == 5 and not rbac._inflight)
    assert all(len(k) == 32 for k in rbac._cache)  # hashes, never the tokens


@pytest.mark.unit
def test_the_cache_is_bounded_least_recently_used_first():
    client = FakeClient(allowed={f"t{i}" for i in range(10)})
    rbac = KubeRBAC(client, max_entries=4, reviews_per_second=1000)
    for i in range(10):
        rbac.check(f"Bearer t{i}")
        rbac.check("Bearer t0")  # kept fresh
    assert len(rbac._cache) == 4
    reviews = rbac.reviews
    rbac.check("Bearer t0")
    assert rbac.reviews == reviews


@pytest.mark.unit
def test_reviews_past_the_bound_are_busy_cached_grants_still_served():
    client = FakeClient(allowed={"good"})
    rbac = KubeRBAC(client, max_reviews=2, reviews_per_second=1000)
    assert rbac.check("Bearer good") == kuberbac.ALLOWED
    client.gate = threading.Event()
    held = [threading.Thread(target=rbac.check, args=(f"Bearer slow{i}",)) for i in range(2)]
    entered = client.entered
    for t in held:
        t.start()
    assert wait_until(lambda: client.entered == entered + 2)  # both held in their review
    assert rbac.check("Bearer another") == kuberbac.BUSY
    assert rbac.check("Bearer good") == kuberbac.ALLOWED
    client.gate.set()
    for t in held:
        t.join(5)


@pytest.mark.unit
def test_the_review_rate_is_bounded():
    clock = Clock()
    rbac = KubeRBAC(FakeClient(), reviews_per_second=5, clock=clock)
    verdicts = [rbac.check(f"Bearer x{i}") for i in range(20)]
    assert verdicts.count(kuberbac.UNAUTHENTICATED) == 5
    assert verdicts.count(kuberbac.BUSY) == 15
    clock.now += 1
    assert rbac.check("Bearer y") == kuberbac.UNAUTHENTICATED


@pytest.mark.unit
def test_failures_are_503_and_not_cached():
    client = FakeClient(allowed={"good"}, fail=True)
    rbac = KubeRBAC(client)
    assert rbac.check("Bearer good") == kuberbac.UNAVAILABLE
    client.fail = False
    assert rbac.check("Bearer good") == kuberbac.ALLOWED


# --- KubeClient.create: the reviews' POSTs, bounded like GETs ----------------------------


def one_answer_server(reply_chunks, every=0.0):
    """A socket server answering one request with `reply_chunks`, `every` seconds apart.

    It reads the whole request before it answers and, once it has sent, waits for the
    client to close: a socket closed with bytes unread (the body of a POST sent apart
    from its head) sends a reset, and the reset drops what the client had not read yet,
    so the client saw "connection reset" instead of the reply it was tested on."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def serve():
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(10)
            read_request(conn)
            for chunk in reply_chunks:
                try:
                    conn.sendall(chunk)
                except OSError:
                    return
                time.sleep(every)
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_WR)
                while conn.recv(65536):
                    pass

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}"


def read_request(conn):
    """One request's head and its Content-Length body, read off `conn`."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        if not more:
            return
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    while length and len(body) < int(length[1]):
        more = conn.recv(65536)
        if not more:
            break
        body += more


@pytest.mark.unit
def test_a_review_reply_past_its_cap_is_refused():
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"
    server = one_answer_server([head, *([b" " * 65536] * 40)])
    client = KubeClient(KubeConfig(server=server))
    with pytest.raises(ReplyTooLarge, match="MAX_CREATE_REPLY_BYTES"):
        client.create(kuberbac.TOKEN_REVIEWS, {"spec": {"token": "x"}}, timeout=5)


@pytest.mark.unit
def test_a_dripping_review_ends_at_its_deadline():
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"
    server = one_answer_server([head, *([b" "] * 100)], every=0.2)
    client = KubeClient(KubeConfig(server=server))
    start = time.monotonic()
    with pytest.raises(httpclient.Timeout, match="no complete answer within 1s"):
        client.create(kuberbac.TOKEN_REVIEWS, {"spec": {"token": "x"}}, timeout=1.0)
    assert time.monotonic() - start < 2.0


@pytest.mark.unit
def test_one_token_under_review_is_429_for_its_other_requests():
    client = FakeClient(allowed={"good"})
    rbac = KubeRBAC(client, reviews_per_second=1000)
    client.gate = threading.Event()
    first = threading.Thread(target=rbac.check, args=("Bearer good",))
    first.start()
    assert wait_until(lambda: client.entered == 1)  # held in its review
    assert rbac.check("Bearer good") == kuberbac.BUSY
    client.gate.set()
    first.join(5)
    assert rbac.check("Bearer good") == kuberbac.ALLOWED
    assert rbac.reviews == 1


@pytest.mark.unit
def test_a_grant_past_half_its_ttl_stands_while_reviews_are_busy_or_failing():
    client, clock = FakeClient(allowed={"good"}), Clock()
    rbac = KubeRBAC(client, ttl=60, max_reviews=1, reviews_per_second=1000, clock=clock)
    assert rbac.check("Bearer good") == kuberbac.ALLOWED
    clock.now += 40
    client.fail = True
    assert rbac.check("Bearer good") == kuberbac.ALLOWED  # its refresh fails: cached grant
    assert wait_until(lambda: rbac.reviews == 2 and not rbac._inflight)
    assert rbac.check("Bearer good") == kuberbac.ALLOWED  # and again, the grant stands
    assert wait_until(lambda: rbac.reviews == 3 and not rbac._inflight)
    clock.now += 21  # past its TTL, the API server still not reachable: the grace
    assert rbac.check("Bearer good") == kuberbac.ALLOWED
    assert wait_until(lambda: rbac.reviews == 4 and not rbac._inflight)
    clock.now += kuberbac.STALE_GRACE
    assert rbac.check("Bearer good") == kuberbac.UNAVAILABLE  # past the grace: fail closed


@pytest.mark.unit
def test_an_expired_grant_stands_through_an_outage_until_the_api_server_answers():
    # An API server restart longer than the TTL, and no refresh tried before expiry: the
    # first scrape after it reviews (the API server cannot be asked), the grant stands in
    # its grace; the first answer the API server gives then rules, a refusal included.
    client, clock, rbac = granted()
    clock.now += 90
    client.fail = True
    assert rbac.check("Bearer good") == kuberbac.ALLOWED  # reviewed: unreachable, grace
    assert rbac.check("Bearer good") == kuberbac.ALLOWED  # reviewed again, in the background
    assert wait_until(lambda: rbac.reviews == 3 and not rbac._inflight)
    assert rbac.check("Bearer unknown") == kuberbac.UNAVAILABLE  # nothing to stand on
    assert wait_until(lambda: not rbac._inflight)
    client.fail = False
    client.allowed = set()  # revoked while the API server was away
    assert rbac.check("Bearer good") == kuberbac.ALLOWED  # served while the review runs
    assert wait_until(lambda: not rbac._inflight)
    assert rbac.check("Bearer good") == kuberbac.UNAUTHENTICATED


@pytest.mark.unit
def test_a_grant_due_for_review_is_served_while_a_slow_api_server_answers():
    # An API server restarting accepts connections and answers seconds later: the scrape
    # that finds a cached grant due for its refresh must not wait for that answer (a scrape
    # timeout is a few seconds), and the next ones neither.
    client, clock, rbac = granted()
    clock.now += 31
    client.gate = threading.Event()
    for _ in range(3):
        start = time.monotonic()
        assert rbac.check("Bearer good") == kuberbac.ALLOWED
        assert time.monotonic() - start < 1.0
    assert wait_until(lambda: client.entered == 3)  # one refresh, held at the gate
    client.gate.set()
    assert wait_until(lambda: not rbac._inflight)
    assert rbac.reviews == 2
    # The refreshed grant is fresh again: no review until half its TTL has passed anew.
    clock.now += 29
    assert rbac.check("Bearer good") == kuberbac.ALLOWED
    assert rbac.reviews == 2
