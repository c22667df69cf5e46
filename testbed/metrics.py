"""Reading scrapes in tests: samples from families or from exposition text."""

import time

from prometheus_client.parser import text_string_to_metric_families


def sample(families, name, **labels):
    for f in families:
        for s in f.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise KeyError(f"{name}{labels} not in scrape")


def wait_until(predicate, timeout=5.0, interval=0.02):
    """predicate() until it is true (True) or `timeout` seconds pass (False); an API read
    as the predicate wants an `interval` of a second or so."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def parse_exposition(text):
    """Families parsed from exposition text, so tests read what Prometheus would."""
    return list(text_string_to_metric_families(text))


def collect(collector):
    """One scrape's families from a collector alone, as the Scraper makes them."""
    return list(collector.families(collector.observe()))
