"""A few slots for expensive work (bcrypt checks), shared fairly between client addresses
and, within an address, between the usernames it sends.

A guessing flood must not take the slots a valid scraper needs, yet a waiting check
holds a worker thread, so neither the flood nor the wait can be unbounded:
- a client (an IPv4 address, or an IPv6 /64: one host hands out a /64) runs at most
  `per_client` checks at once;
- a flow (a client and a username) has at most `per_user` checks running or waiting;
  more are refused at once;
- at most `running` run at once, and at most `waiting` more wait, each at most
  `wait_seconds`; so the work holds at most running + waiting threads;
- a freed slot goes to the waiter whose client runs the fewest checks, then whose flow
  does, of those the client served least recently (one served never, or not since it
  last held nothing, first): a scraper goes ahead of every flooding address, a username
  sent from a flooding address ahead of the username it floods, and flooding addresses
  take turns;
- when the waiting room is full, a newcomer takes the place of the newest waiter of the
  client holding the most, if that client holds more than the newcomer's would; or, of
  its own client, of the flow holding the most, if that flow holds more than the
  newcomer's would.

So a flood from k addresses holds at most k * per_client of the slots; a scraper from
another address waits for one check to finish, not for the flood, and so does a scraper
at a flooding address under a username the flood does not send. What no slot policy
can do: tell a guesser at the scraper's address sending the scraper's username from the
scraper before its password is checked (web/auth.py's cache answers the scraper without
a slot once it has been checked).
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


Flow = tuple[str, str]  # (client, username)


class _Waiter:
    __slots__ = ("client", "event", "flow", "granted", "order")

    def __init__(self, flow: Flow, order: int):
        self.client, self.flow = flow[0], flow
        self.order = order
        self.event = threading.Event()
        self.granted = False


class FairSlots:
    def __init__(
        self, running: int, waiting: int, per_client: int, per_user: int, wait_seconds: float
    ):
        self._capacity = running
        self._room = waiting
        self._per_client = per_client
        self._per_user = per_user
        self._wait_seconds = wait_seconds
        self._lock = threading.Lock()
        self._running: Counter[str] = Counter()
        self._flows_running: Counter[Flow] = Counter()
        self._waiters: list[_Waiter] = []  # in order of arrival
        self._order = itertools.count()
        # When each client holding something was last granted a slot, by grant number.
        self._served: dict[str, int] = {}
        self._grants = itertools.count()

    @contextmanager
    def slot(self, address: str, user: str = "") -> Iterator[None]:
        """Hold a slot for `user` at `address` meanwhile; raises NoSlot."""
        flow = (client_key(address), user)
        self._acquire(flow)
        try:
            yield
        finally:
            self._release(flow)

    def _held(self, client: str) -> int:
        return self._running[client] + sum(w.client == client for w in self._waiters)

    def _flow_held(self, flow: Flow) -> int:
        return self._flows_running[flow] + sum(w.flow == flow for w in self._waiters)

    def _may_run(self, client: str) -> bool:
        return self._running.total() < self._capacity and self._running[client] < self._per_client

    def _acquire(self, flow: Flow) -> None:
        client = flow[0]
        with self._lock:
            if self._flow_held(flow) >= self._per_user:
                raise NoSlot
            if self._may_run(client) and not any(w.client == client for w in self._waiters):
                self._grant(flow)
                return
            if len(self._waiters) >= self._room and not self._make_room(flow):
                raise NoSlot
            waiter = _Waiter(flow, next(self._order))
            self._waiters.append(waiter)
        waiter.event.wait(self._wait_seconds)
        with self._lock:
            if waiter.granted:  # granted, perhaps just as the wait timed out
                return
            if waiter in self._waiters:  # timed out; else dropped for a lighter client
                self._waiters.remove(waiter)
            self._forget_if_idle(client)
            raise NoSlot

    def _grant(self, flow: Flow) -> None:
        self._running[flow[0]] += 1
        self._flows_running[flow] += 1
        self._served[flow[0]] = next(self._grants)

    def _forget_if_idle(self, client: str) -> None:
        if not self._held(client):
            self._served.pop(client, None)

    def _make_room(self, flow: Flow) -> bool:
        """Drop the newest waiter of the client holding the most, if it holds more than
        the newcomer's would; else of the newcomer's own client, of the flow holding the
        most, if it holds more than the newcomer's would. True when a place was freed."""
        client = flow[0]
        heavier = [w for w in self._waiters if self._held(w.client) > self._held(client) + 1]
        if not heavier:
            mine = self._flow_held(flow) + 1
            heavier = [
                w for w in self._waiters if w.client == client and self._flow_held(w.flow) > mine
            ]
        if not heavier:
            return False
        victim = max(
            heavier, key=lambda w: (self._held(w.client), self._flow_held(w.flow), w.order)
        )
        self._waiters.remove(victim)
        victim.event.set()  # it finds itself neither granted nor waiting: NoSlot
        return True

    def _release(self, flow: Flow) -> None:
        with self._lock:
            for running, key in ((self._running, flow[0]), (self._flows_running, flow)):
                running[key] -= 1
                if not running[key]:
                    del running[key]
            while eligible := [w for w in self._waiters if self._may_run(w.client)]:
                chosen = min(
                    eligible,
                    key=lambda w: (
                        self._running[w.client],
                        self._flows_running[w.flow],
                        self._served.get(w.client, -1),
                        w.order,
                    ),
                )
                self._waiters.remove(chosen)
                self._grant(chosen.flow)
                chosen.granted = True
                chosen.event.set()
            self._forget_if_idle(flow[0])
