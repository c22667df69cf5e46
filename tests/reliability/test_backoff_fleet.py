"""The informers' backoff (kube_scale_exporter.kube.Backoff, the real class) across a fleet: 7,500
node-mode pods losing the API server at the same moment, simulated with seeded jitter.

The figures asserted here are the ones docs/reliability.md gives: how hard the fleet
knocks while the server is down and how it comes back.
"""

import random
from collections import Counter

import pytest

from kube_scale_exporter.kube import Backoff

pytestmark = pytest.mark.unit

PODS = 7_500
CAP = 30.0


def fleet(outage: float, seed: int = 7):
    """(attempts per second since the outage began, reconnections per second after it)."""
    rng = random.Random(seed)
    attempts, back = Counter(), Counter()
    for _ in range(PODS):
        backoff, t = Backoff(rand=rng.random), 0.0
        while True:
            t += backoff.next_delay()
            attempts[int(t)] += 1
            if t >= outage:
                back[int(t - outage)] += 1
                break
    return attempts, back


@pytest.mark.parametrize("outage", [5, 30, 120, 600])
def test_every_pod_is_back_within_the_cap_after_the_server_returns(outage):
    _, back = fleet(outage)
    assert sum(back.values()) == PODS
    assert max(back) < CAP


def test_a_long_outage_costs_a_steady_trickle_not_waves():
    attempts, back = fleet(600)
    steady = [attempts[s] for s in range(60, 600)]
    # Each pod retries every 15-30 s: 7,500 pods cost 250-500 attempts a second.
    assert max(steady) <= PODS / 15 * 1.15
    assert min(steady) >= PODS / 30 * 0.85
    # And they come back spread over the cap, not at once.
    assert max(back.values()) <= PODS / 15 * 1.25


def test_the_first_retry_wave_and_a_short_blip():
    attempts, back = fleet(5)
    # The first retry of every pod falls in 0.5-1 s: the one burst the policy allows,
    # against a server that is down (refused connections cost it nothing).
    assert attempts[0] == PODS
    # A 5 s blip: pods come back within 8 s, at most about half in one second.
    assert max(back) <= 8
    assert max(back.values()) <= PODS / 2
