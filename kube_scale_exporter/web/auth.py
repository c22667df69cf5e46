"""Basic auth against bcrypt hashes, without letting bcrypt hang or time the server.

bcrypt costs ~70-90 ms at cost 10 here: paid on every scrape it would outweigh the
scrape. A successful check is remembered under an HMAC of (user, stored hash, password)
keyed by a secret made at start-up: the cache holds no password, an entry is useless
outside this process, and a changed hash misses it. Failures are never cached.

What a hostile file or client could otherwise do, and what stops it:
- A cost of 31 takes days per check: costs outside MIN_COST..MAX_COST, salts bcrypt
  cannot use and hashes no password can match are refused when the file is read
  (`hash_problem`), never discovered at the first login.
- Nothing here hashes at load time or under the config lock: unknown users are checked
  against DUMMY_HASH, a constant of the lowest cost.
- Checks run in parallel (bcrypt releases the GIL), AUTH_SLOTS at once, shared fairly
  between client addresses and the usernames each sends (web/fairslots.py): one address
  runs at most AUTH_PER_CLIENT checks, one username from one address has at most
  AUTH_PER_USER running or waiting, at most AUTH_WAITING wait (AUTH_WAIT_SECONDS at
  most), and a freed slot goes to the address running the fewest, then the username.
  A check that gets no slot is answered 503 at once: a guessing flood holds a few worker
  threads, never all of them, and a scraper at another address, or at the flood's
  address under another username, waits for one check, not for the flood's. The
  username is only a string here, whether or not the file has it, so the slots tell
  nothing about which users exist.
- Timing: every uncached check, for a known user or not, right password or not, lasts
  at least as long as a check at the file's highest cost takes on this machine
  (measured as checks run, with a margin): response times do not tell which users
  exist, even when their hashes have different costs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import threading
import time
from collections import OrderedDict, deque

from kube_scale_exporter.web.fairslots import FairSlots, NoSlot

MIN_COST, MAX_COST = 4, 14  # 14: ~1.3 s a check on one core here, ~6.5 s at 200m CPU
BCRYPT_ALPHABET = "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
BCRYPT_HASH = re.compile(r"^\$2[aby]\$(\d\d)\$([./A-Za-z0-9]{22})([./A-Za-z0-9]{31})$")
# bcrypt of a random password at cost 4: what an unknown user is checked against.
DUMMY_HASH = b"$2b$04$o2MUlidm/Xl7itl0X57usenafspOV1fnISU78Nf22YXX5XEeyq90O"

AUTH_CACHE_SIZE = 64  # successful checks remembered; a handful of scrapers is normal
# Two checks at once already take a 2-core node's CPU (the DaemonSet has less); more would
# only slow each down, a valid scraper's with them.
AUTH_SLOTS = 2
AUTH_WAITING = 4
AUTH_PER_CLIENT = 2
AUTH_PER_USER = 2
# A valid scraper waits for one check (~0.1-1.3 s at cost 10-14); a waiter passed over
# for this long belongs to a flood.
AUTH_WAIT_SECONDS = 5.0
TIMING_MARGIN = 1.25
# Costs below this are timed mostly by call overhead, too noisy to extrapolate from.
CALIBRATION_COST = 8
CLOCK_SAMPLES = 16


class AuthBusy(Exception):
    """No check slot for this client now: answer 503, do not queue."""


def hash_problem(hashed: str) -> str | None:
    """Why bcrypt could never (or should never) check a password against `hashed`."""
    m = BCRYPT_HASH.match(hashed)
    if m is None:
        return (
            "must be a bcrypt hash ($2a$/$2b$/$2y$, e.g. from htpasswd -nBC 10), "
            "not a plain password"
        )
    cost = int(m[1])
    if not MIN_COST <= cost <= MAX_COST:
        seconds = 0.08 * 2 ** (cost - 10)  # cost 10 takes ~80 ms here
        took = f"{seconds / 3600:.0f} hours" if seconds > 7200 else f"{seconds:.2g} s"
        return (
            f"bcrypt cost {cost:02d} is outside {MIN_COST:02d}-{MAX_COST} (a check at "
            f"cost {cost} takes ~{took} of CPU)"
        )
    # 22 characters carry 132 bits for a 128-bit salt, 31 carry 186 for a 184-bit hash:
    # bcrypt refuses a salt whose spare bits are set, and no hash with them set matches.
    if BCRYPT_ALPHABET.index(m[2][-1]) % 16:
        return "the bcrypt salt is invalid (its last character must be one of . O e u)"
    if BCRYPT_ALPHABET.index(m[3][-1]) % 4:
        return (
            "the bcrypt hash is corrupt (its last character is impossible): "
            "no password could match it"
        )
    return None


def hash_cost(hashed: bytes) -> int:
    return int(hashed[4:6])


class _Clock:
    """Seconds per unit of bcrypt work (a check at cost c is 2**c units), measured.

    The slowest of the recent checks counts, not an average: when load slows the machine,
    the padding must grow at once, or checks at the highest cost would stand out."""

    def __init__(self):
        self._lock = threading.Lock()
        self._units: deque[float] = deque(maxlen=CLOCK_SAMPLES)

    def record(self, cost: int, seconds: float) -> None:
        if cost >= CALIBRATION_COST:
            with self._lock:
                self._units.append(seconds / 2**cost)

    def expected(self, cost: int) -> float:
        if not self._units:  # first check in this process: measure once, ~15 ms
            import bcrypt  # noqa: PLC0415  (only where basic auth is configured)

            started = time.perf_counter()
            bcrypt.hashpw(b"calibration", bcrypt.gensalt(CALIBRATION_COST))
            self.record(CALIBRATION_COST, time.perf_counter() - started)
        with self._lock:
            return max(self._units) * 2**cost


CLOCK = _Clock()


class BasicAuth:
    """Checks `Authorization: Basic` headers against the users' bcrypt hashes."""

    def __init__(self, users: dict[str, bytes]):
        self._users = users
        self._key = secrets.token_bytes(32)
        self._ok: OrderedDict[bytes, None] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._slots = FairSlots(
            AUTH_SLOTS, AUTH_WAITING, AUTH_PER_CLIENT, AUTH_PER_USER, AUTH_WAIT_SECONDS
        )
        self.max_cost = max((hash_cost(h) for h in users.values()), default=MIN_COST)

    def check(self, header: str | None, client: str = "") -> bool:
        """True for valid credentials; raises AuthBusy when `client` (the peer's address)
        gets no check slot."""
        credentials = _parse_basic(header)
        if credentials is None:
            return False
        user, password = credentials
        stored = self._users.get(user)
        hashed = stored if stored is not None else DUMMY_HASH
        key = hmac.new(
            self._key, b"\0".join((user.encode(), hashed, password)), hashlib.sha256
        ).digest()
        with self._cache_lock:
            if key in self._ok:
                self._ok.move_to_end(key)
                return True
        try:
            with self._slots.slot(client, user):
                ok = self._timed_check(password, hashed) and stored is not None
        except NoSlot:
            raise AuthBusy from None
        if ok:
            with self._cache_lock:
                self._ok[key] = None
                if len(self._ok) > AUTH_CACHE_SIZE:
                    self._ok.popitem(last=False)
        return ok

    def _timed_check(self, password: bytes, hashed: bytes) -> bool:
        floor = CLOCK.expected(self.max_cost) * TIMING_MARGIN
        started = time.perf_counter()
        ok = _bcrypt_matches(password, hashed)
        took = time.perf_counter() - started
        CLOCK.record(hash_cost(hashed), took)
        if took < floor:
            time.sleep(floor - took)
        return ok


def _parse_basic(header: str | None) -> tuple[str, bytes] | None:
    if not header:
        return None
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except ValueError:
        return None
    user, sep, password = decoded.partition(b":")
    if not sep:
        return None
    return user.decode("utf-8", "replace"), password


def _bcrypt_matches(password: bytes, hashed: bytes) -> bool:
    import bcrypt  # noqa: PLC0415  (only where basic auth is configured)

    try:
        return bcrypt.checkpw(password, hashed)
    except ValueError:  # longer than bcrypt's 72 bytes: Go's bcrypt refuses it too
        return False
