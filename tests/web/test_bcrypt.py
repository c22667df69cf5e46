"""bcrypt hashes that could hang or time the server, against the real exporter process;
and the hash checks beside what the bcrypt library itself accepts."""

import base64
import http.client
import os
import statistics
import threading
import time

import bcrypt
import pytest
import requests

from kube_scale_exporter.web.auth import BCRYPT_ALPHABET, hash_problem
from testbed.guessers import Guessers
from testbed.metrics import wait_until

from .test_reload import eventually, replace_file
from .test_webconfig import session, tls_block

# A real cost-04 hash, edited into the hostile forms below (costs are only digits in it).
HASH4 = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()


def with_cost(hashed, cost):
    return f"{hashed[:4]}{cost:02d}{hashed[6:]}"


def salt_with_last(hashed, char):
    return hashed[:28] + char + hashed[29:]


HOSTILE = {
    "cost 31": (with_cost(HASH4, 31), "bcrypt cost 31 is outside 04-14"),
    "cost 15": (with_cost(HASH4, 15), "bcrypt cost 15 is outside 04-14"),
    "cost 03": (with_cost(HASH4, 3), "bcrypt cost 03 is outside 04-14"),
    "invalid salt": (
        salt_with_last(HASH4, "/" if HASH4[28] != "/" else "P"),
        "the bcrypt salt is invalid",
    ),
    "impossible hash": (
        HASH4[:-1] + BCRYPT_ALPHABET[BCRYPT_ALPHABET.index(HASH4[-1]) ^ 1],
        "the bcrypt hash is corrupt",
    ),
}


@pytest.mark.integration
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_hash_exits_2_at_start_naming_file_and_line(case, tmp_path, run_exporter):
    hashed, message = HOSTILE[case]
    config = tmp_path / "web.yml"
    config.write_text(f"basic_auth_users:\n  ok: '{HASH4}'\n  bad: '{hashed}'\n")
    started = time.monotonic()
    result = run_exporter("--web.config.file", str(config), "--collector.disable-defaults")
    assert result.returncode == 2, result
    assert f"{config}:3: the password of 'bad': {message}" in result.stderr
    assert time.monotonic() - started < 10  # cost 31 used to hang here, silently


@pytest.mark.unit
def test_the_checks_agree_with_the_bcrypt_library():
    """Every last salt character, and every last hash character, both ways."""
    for char in BCRYPT_ALPHABET:
        edited = salt_with_last(HASH4, char)
        try:
            bcrypt.checkpw(b"pw", edited.encode())
            usable = True
        except ValueError:
            usable = False
        assert (hash_problem(edited) is None) == usable, edited
        edited = HASH4[:-1] + char
        if hash_problem(edited) is None:
            assert edited == HASH4 or not bcrypt.checkpw(b"pw", edited.encode())
        else:  # refused: bcrypt could never match it
            assert not bcrypt.checkpw(b"pw", edited.encode())
    assert hash_problem(HASH4) is None


def basic(user, password):
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.mark.integration
def test_a_cost_31_user_added_at_runtime_is_refused_and_nothing_hangs(
    pki, tmp_path, start_exporter
):
    users = f"basic_auth_users:\n  prometheus: '{HASH4}'\n"
    config = tmp_path / "web.yml"
    exp = start_exporter(tls_block(pki) + users, config_path=config)
    assert (
        session().get(exp.url + "/metrics", auth=("prometheus", "pw"), verify=pki.ca, timeout=10).ok
    )
    (tmp_path / "next.yml").write_text(
        tls_block(pki) + users + f"  intruder: '{with_cost(HASH4, 31)}'\n"
    )
    replace_file(config, tmp_path / "next.yml")
    # The files are looked at when connections and requests come, at most once a second.
    assert eventually(
        lambda: (
            session().get(exp.url + "/healthz", verify=pki.ca, timeout=10).ok
            and "not reloaded" in exp.proc.log_tail()
        )
    ), exp.proc.log_tail()
    # The previous settings stay in force, and every request answers at once.
    for path, auth, code in (
        ("/healthz", None, 200),
        ("/metrics", ("prometheus", "pw"), 200),
        ("/metrics", ("intruder", "x"), 401),
    ):
        started = time.monotonic()
        r = session().get(exp.url + path, auth=auth, verify=pki.ca, timeout=10)
        assert r.status_code == code and time.monotonic() - started < 2, path
    assert f"{config}:6: the password of 'intruder': bcrypt cost 31" in exp.proc.log_tail()


@pytest.mark.integration
def test_response_times_do_not_tell_which_users_exist(start_exporter):
    """Users of different costs and an unknown user: a wrong password takes as long for
    each (each check lasts at least as long as one at the file's highest cost)."""
    cheap = bcrypt.hashpw(b"right", bcrypt.gensalt(4)).decode()
    dear = bcrypt.hashpw(b"right", bcrypt.gensalt(10)).decode()
    exp = start_exporter(
        f"basic_auth_users:\n  cheap: '{cheap}'\n  dear: '{dear}'\n", scheme="http"
    )
    s = session()

    def ms(user, i):
        started = time.perf_counter()
        r = s.get(exp.url + "/metrics", headers=basic(user, f"wrong{i}"), timeout=10)
        assert r.status_code == 401
        return (time.perf_counter() - started) * 1000

    ms("dear", -1)  # the clock's first samples
    # Interleaved, so that a machine whose load changes meanwhile slows every user alike.
    took = {user: [] for user in ("dear", "cheap", "nobody")}
    for i in range(12):
        for user, series in took.items():
            series.append(ms(user, i))
    times = {user: statistics.median(t) for user, t in took.items()}
    dear_ms = times["dear"]
    for user in ("cheap", "nobody"):
        # Unpadded, cheap and nobody answer in ~1-2 ms against ~70 ms for dear.
        assert times[user] > 0.8 * dear_ms, times
    assert s.get(exp.url + "/metrics", headers=basic("cheap", "right"), timeout=10).ok


@pytest.mark.integration
def test_a_guessing_flood_at_cost_12_leaves_healthz_and_scrapes_answering(start_exporter):
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(12)).decode()
    exp = start_exporter(f"basic_auth_users:\n  prometheus: '{hashed}'\n", scheme="http")
    prometheus = session()
    assert prometheus.get(
        exp.url + "/metrics", headers=basic("prometheus", "right"), timeout=20
    ).ok  # pays bcrypt once, then cached
    stop = threading.Event()
    codes = []

    def guess():
        with requests.Session() as s:
            s.trust_env = False
            while not stop.is_set():
                codes.append(
                    s.get(
                        exp.url + "/metrics", headers=basic("prometheus", "guess"), timeout=30
                    ).status_code
                )

    guessers = [threading.Thread(target=guess) for _ in range(os.cpu_count() * 8)]
    for t in guessers:
        t.start()
    try:
        assert wait_until(lambda: len(codes) >= len(guessers), 30)  # the flood is on
        for _ in range(10):
            # Waiting for a bcrypt slot takes at least one whole check behind the flood; the
            # cached credential needs none. One check timed here, under the same load, is
            # the bound.
            started = time.monotonic()
            bcrypt.checkpw(b"guess", hashed.encode())
            one_check = time.monotonic() - started
            started = time.monotonic()
            assert session().get(exp.url + "/healthz", timeout=10).ok
            assert prometheus.get(
                exp.url + "/metrics", headers=basic("prometheus", "right"), timeout=10
            ).ok
            assert time.monotonic() - started < one_check
    finally:
        stop.set()
        for t in guessers:
            t.join()
    assert set(codes) <= {401, 503} and 503 in codes  # excess guesses refused, not queued


FLOOD_SOURCES = {
    "one address": ["127.0.0.2"],
    "3 addresses": ["127.0.0.2", "127.0.0.3", "127.0.0.4"],
    "the scraper's address": ["127.0.0.1"],
}
SCRAPE_TIMEOUT = 10.0  # a typical scrape timeout


@pytest.mark.integration
@pytest.mark.parametrize("guessers", [16, 100])
@pytest.mark.parametrize("where", sorted(FLOOD_SOURCES))
def test_a_guessing_flood_leaves_a_valid_scrapers_first_scrape_answered(
    guessers, where, start_exporter
):
    """Guessers from one address or a few take their addresses' share of the bcrypt
    checks, not every one: a scraper at another address, whose password is not yet
    checked, gets its scrape within a scrape timeout (it used to get 503 at once). So
    does a scraper at the guessers' own address (a NAT, a shared node IP): the flooded
    username has its share of the address, the scraper's username one of its own."""
    users = {"prometheus": "not-what-they-guess", **{f"scraper{i}": f"pw-{i}" for i in range(3)}}
    lines = "".join(
        f"  {user}: '{bcrypt.hashpw(pw.encode(), bcrypt.gensalt(10)).decode()}'\n"
        for user, pw in users.items()
    )
    exp = start_exporter("basic_auth_users:\n" + lines, scheme="http")
    flood = Guessers(exp.port, guessers, FLOOD_SOURCES[where])
    try:
        for i in range(3):  # each a user not yet checked: each pays its bcrypt check
            conn = http.client.HTTPConnection(
                "127.0.0.1", exp.port, source_address=("127.0.0.1", 0), timeout=SCRAPE_TIMEOUT
            )
            conn.request("GET", "/metrics", headers=basic(f"scraper{i}", f"pw-{i}"))
            response = conn.getresponse()
            assert response.status == 200, (response.status, response.read())
            assert b"kubescale_build_info" in response.read()
            conn.close()
    finally:
        answers = flood.stop()
    assert answers.get("401", 0) > 0  # the guesses were checked, and failed
    assert answers.get("503", 0) > 0  # past their addresses' share: refused, not queued
