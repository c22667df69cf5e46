"""Retry delays after API errors: exponential, jittered, reset by a success."""

import random


class Backoff:
    """Exponential backoff with jitter, reset after a success.

    The n-th consecutive failure waits a uniform random time in
    [0.5, 1] x min(cap, initial x 2^(n-1)): with the defaults 0.5-1 s, 1-2 s, 2-4 s, ...
    and never more than 30 s. The jitter keeps a fleet of exporters from reconnecting in
    lockstep after an API server restart.
    """

    def __init__(self, initial=1.0, cap=30.0, rand=random.random):
        self.initial = initial
        self.cap = cap
        self._rand = rand
        self._failures = 0

    def next_delay(self) -> float:
        self._failures += 1
        ceiling = min(self.cap, self.initial * 2 ** (self._failures - 1))
        return ceiling * (0.5 + 0.5 * self._rand())

    def reset(self):
        self._failures = 0
