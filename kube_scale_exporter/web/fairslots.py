"""A few slots for expensive work (bcrypt checks), shared fairly between client addresses.

A guessing flood must not take the slots a valid scraper needs, yet a waiting check
holds a worker thread, so neither the flood nor the wait can be unbounded:
- a client (an IPv4 address, or an IPv6 /64: one host hands out a /64) has at most
  `per_client` checks running or waiting; more are refused at once;
- at most `running` run at once, and at most `waiting` more wait, each at most
  `wait_seconds`; so the work holds at most running + waiting threads;
- a freed slot goes to the waiter whose client runs the fewest checks, of those the
  client served least recently (one served never, or not since it last held nothing,
  first): a scraper goes ahead of every flooding address, and flooding addresses take
  turns;
- when the waiting room is full, a newcomer takes the place of the newest waiter of the
  client holding the most, if that client holds more than the newcomer's would.

So a flood from k addresses holds at most k * per_client of the slots and waiting places;
a scraper from another address waits for one check to finish, not for the flood. One
limit stays: guessers at the scraper's own address (the same pod, a shared NAT) share
its `per_client`.
"""

from __future__ import annotations

import ipaddress
import itertools
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager


class NoSlot(Exception):
    """The client has its share, or nothing frees in time: refuse, do not queue."""


def client_key(address: str) -> str:
    """What one client is: its IPv4 address (also when IPv4-mapped), its IPv6 /64."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class _Waiter:
    __slots__ = ("client", "event", "granted", "order")

    def __init__(self, client: str, order: int):
        self.client = client
        self.order = order
        self.event = threading.Event()
        self.granted = False


class FairSlots:
    def __init__(self, running: int, waiting: int, per_client: int, wait_seconds: float):
        self._capacity = running
        self._room = waiting
        self._per_client = per_client
        self._wait_seconds = wait_seconds
        self._lock = threading.Lock()
        self._running: Counter[str] = Counter()
        self._waiters: list[_Waiter] = []  # in order of arrival
        self._order = itertools.count()
        # When each client holding something was last granted a slot, by grant number.
        self._served: dict[str, int] = {}
        self._grants = itertools.count()

    @contextmanager
    def slot(self, address: str) -> Iterator[None]:
        """Hold a slot for `address` meanwhile; raises NoSlot."""
        client = client_key(address)
        self._acquire(client)
        try:
            yield
        finally:
            self._release(client)

    def _held(self, client: str) -> int:
        return self._running[client] + sum(w.client == client for w in self._waiters)

    def _acquire(self, client: str) -> None:
        with self._lock:
            held = self._held(client)
            if held >= self._per_client:
                raise NoSlot
            if self._running.total() < self._capacity:  # then nobody waits either
                self._grant(client)
                return
            if len(self._waiters) >= self._room and not self._make_room(held + 1):
                raise NoSlot
            waiter = _Waiter(client, next(self._order))
            self._waiters.append(waiter)
        waiter.event.wait(self._wait_seconds)
        with self._lock:
            if waiter.granted:  # granted, perhaps just as the wait timed out
                return
            if waiter in self._waiters:  # timed out; else dropped for a lighter client
                self._waiters.remove(waiter)
            self._forget_if_idle(client)
            raise NoSlot

    def _grant(self, client: str) -> None:
        self._running[client] += 1
        self._served[client] = next(self._grants)

    def _forget_if_idle(self, client: str) -> None:
        if not self._held(client):
            self._served.pop(client, None)

    def _make_room(self, newcomer_holds: int) -> bool:
        """Drop the newest waiter of the client holding the most, if it holds more than
        the newcomer would; True when a place was freed."""
        victim = max(self._waiters, key=lambda w: (self._held(w.client), w.order))
        if self._held(victim.client) <= newcomer_holds:
            return False
        self._waiters.remove(victim)
        victim.event.set()  # it finds itself neither granted nor waiting: NoSlot
        return True

    def _release(self, client: str) -> None:
        with self._lock:
            self._running[client] -= 1
            if not self._running[client]:
                del self._running[client]
            if self._waiters:
                chosen = min(
                    self._waiters,
                    key=lambda w: (
                        self._running[w.client],
                        self._served.get(w.client, -1),
                        w.order,
                    ),
                )
                self._waiters.remove(chosen)
                self._grant(chosen.client)
                chosen.granted = True
                chosen.event.set()
            self._forget_if_idle(client)
