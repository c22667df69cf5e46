"""The bcrypt check slots, shared between client addresses (web/fairslots.py), with real
threads; which thread got a slot is read from the order they entered it."""

import threading

import pytest

from kube_scale_exporter.web.fairslots import FairSlots, NoSlot, client_key
from testbed.metrics import wait_until

pytestmark = pytest.mark.unit

LONG = 60.0  # a wait no test should reach: a test that waits it out has failed


class Holder:
    """A thread that takes a slot for `address` (as `user`) and holds it until `done()`."""

    def __init__(self, slots, address, entered, user=""):
        self.address, self.user = address, user
        self.outcome = None
        self._release = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(slots, entered), daemon=True)
        self._thread.start()

    def _run(self, slots, entered):
        try:
            with slots.slot(self.address, self.user):
                entered.append(f"{self.user}@{self.address}" if self.user else self.address)
                self.outcome = "held"
                self._release.wait(LONG)
        except NoSlot:
            self.outcome = "refused"

    def done(self):
        self._release.set()
        self._thread.join(LONG)
        assert not self._thread.is_alive()


def waiting(slots):
    return len(slots._waiters)  # the only way to see a thread blocked inside slot()


def line_up(slots, entered, *addresses):
    """A Holder for each address in turn, each holding or waiting before the next comes."""
    holders = []
    for address in addresses:
        before = (len(entered), waiting(slots))
        holders.append(Holder(slots, address, entered))
        assert wait_until(lambda was=before: (len(entered), waiting(slots)) != was)
    return holders


@pytest.fixture
def entered():
    return []


def test_a_client_past_its_share_is_refused_at_once(entered):
    slots = FairSlots(running=2, waiting=4, per_client=2, per_user=2, wait_seconds=LONG)
    first, second = Holder(slots, "10.0.0.1", entered), Holder(slots, "10.0.0.1", entered)
    assert wait_until(lambda: len(entered) == 2)
    with pytest.raises(NoSlot):  # a third would wait LONG if it were queued
        with slots.slot("10.0.0.1"):
            pass
    other = Holder(slots, "10.0.0.2", entered)  # every slot runs: it waits its turn
    assert wait_until(lambda: waiting(slots) == 1)
    first.done()
    assert wait_until(lambda: entered[2:] == ["10.0.0.2"])
    for h in (second, other):
        h.done()


def test_an_address_with_nothing_running_goes_ahead_of_a_flooding_one(entered):
    slots = FairSlots(running=1, waiting=4, per_client=2, per_user=2, wait_seconds=LONG)
    # The flood's second waits first, yet the scraper gets the next slot.
    *flood, scraper = line_up(slots, entered, "10.0.0.1", "10.0.0.1", "10.0.0.9")
    assert waiting(slots) == 2
    flood[0].done()
    assert wait_until(lambda: len(entered) == 2)
    assert entered[1] == "10.0.0.9"
    scraper.done()
    assert wait_until(lambda: len(entered) == 3)
    flood[1].done()


def test_flooding_addresses_take_turns(entered):
    slots = FairSlots(running=1, waiting=4, per_client=2, per_user=2, wait_seconds=LONG)
    a1, a2, b1 = line_up(slots, entered, "10.0.0.1", "10.0.0.1", "10.0.0.2")
    a1.done()  # b was never served, a just was: b
    assert wait_until(lambda: len(entered) == 2)
    (a3,) = line_up(slots, entered, "10.0.0.1")
    assert waiting(slots) == 2
    b1.done()  # a2 waits longest, and a was served before b: a2, then a3
    assert wait_until(lambda: len(entered) == 3)
    a2.done()
    assert wait_until(lambda: len(entered) == 4)
    a3.done()
    assert entered == ["10.0.0.1", "10.0.0.2", "10.0.0.1", "10.0.0.1"]


def test_a_full_waiting_room_drops_a_waiter_of_the_heaviest_address(entered):
    slots = FairSlots(running=1, waiting=2, per_client=2, per_user=2, wait_seconds=LONG)
    a1, a2, c1 = line_up(slots, entered, "10.0.0.1", "10.0.0.1", "10.0.0.3")
    assert waiting(slots) == 2  # the room is full
    b1 = Holder(slots, "10.0.0.2", entered)  # 10.0.0.1 holds 2, more than b would: a2 goes
    assert wait_until(lambda: a2.outcome == "refused")
    assert waiting(slots) == 2
    with pytest.raises(NoSlot):  # everyone waiting holds 1, as this one would: refused
        with slots.slot("10.0.0.4"):
            pass
    a1.done()
    assert wait_until(lambda: len(entered) == 2)
    c1.done()  # it came first
    assert wait_until(lambda: len(entered) == 3)
    b1.done()
    assert entered == ["10.0.0.1", "10.0.0.3", "10.0.0.2"]


def test_a_waiter_passed_over_gives_up(entered):
    slots = FairSlots(running=1, waiting=4, per_client=2, per_user=2, wait_seconds=0.2)
    holder = Holder(slots, "10.0.0.1", entered)
    assert wait_until(lambda: len(entered) == 1)
    with pytest.raises(NoSlot):
        with slots.slot("10.0.0.2"):
            pass
    assert waiting(slots) == 0
    holder.done()
    with slots.slot("10.0.0.2"):  # nothing left behind: the slot is free again
        pass


def test_another_username_at_a_flooding_address_waits_for_one_check_not_the_flood(entered):
    slots = FairSlots(running=2, waiting=4, per_client=2, per_user=2, wait_seconds=LONG)
    guesses = [Holder(slots, "10.0.0.1", entered, "prometheus") for _ in range(2)]
    assert wait_until(lambda: len(entered) == 2)
    with pytest.raises(NoSlot):  # the flooded username holds its share: refused at once
        with slots.slot("10.0.0.1", "prometheus"):
            pass
    scraper = Holder(slots, "10.0.0.1", entered, "scraper")  # the same address: it waits
    assert wait_until(lambda: waiting(slots) == 1)
    guesses[0].done()
    assert wait_until(lambda: entered[2:] == ["scraper@10.0.0.1"])
    for h in (guesses[1], scraper):
        h.done()


def test_a_full_waiting_room_drops_a_waiter_of_its_own_address_heaviest_username(entered):
    slots = FairSlots(running=1, waiting=2, per_client=2, per_user=2, wait_seconds=LONG)
    g1, g2 = line_up(slots, entered, "10.0.0.1", "10.0.0.1")  # "" runs one, waits one
    other = Holder(slots, "10.0.0.1", entered, "other")
    assert wait_until(lambda: waiting(slots) == 2)  # the room is full
    scraper = Holder(slots, "10.0.0.1", entered, "scraper")  # "" holds 2, it would hold 1
    assert wait_until(lambda: g2.outcome == "refused")
    with pytest.raises(NoSlot):  # every username waiting holds 1, as this one would
        with slots.slot("10.0.0.1", "third"):
            pass
    g1.done()
    assert wait_until(lambda: len(entered) == 2)
    other.done()  # it came first
    assert wait_until(lambda: len(entered) == 3)
    scraper.done()
    assert entered == ["10.0.0.1", "other@10.0.0.1", "scraper@10.0.0.1"]


@pytest.mark.parametrize(
    "address, key",
    [
        ("192.0.2.7", "192.0.2.7"),
        ("::ffff:192.0.2.7", "192.0.2.7"),  # an IPv4 client of a dual-stack listener
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:fffe", "2001:db8:1:2::/64"),  # the same host's /64
        ("2001:db8:1:3::1", "2001:db8:1:3::/64"),
    ],
)
def test_a_client_is_an_ipv4_address_or_an_ipv6_64(address, key):
    assert client_key(address) == key
