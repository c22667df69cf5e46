"""Where a member's /metrics is read: its client URL, or a --etcd.metrics-url for its host.

etcd serves /metrics on every client URL, with the client URL's TLS; --listen-metrics-urls
adds listeners (often plain http on port 2381, where client certificates are not asked
for). A cluster's --etcd.metrics-url values are matched to a member by host, the
member's client URL host; `{host}` in their place stands for every member's host
(http://{host}:2381), which suits members discovered from the member list.
"""

from __future__ import annotations

from urllib.parse import urlsplit

HOST = "{host}"


def _host(url: str) -> str | None:
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None


def metrics_url(client_url: str, given: tuple[str, ...]) -> tuple[str | None, str | None]:
    """(base URL to read /metrics from, None) or (None, why there is none)."""
    if not given:
        return client_url, None
    host = _host(client_url)
    for url in given:
        if HOST not in url and _host(url) == host:
            return url, None
    for url in given:
        if HOST in url and host:
            return url.replace(HOST, f"[{host}]" if ":" in host else host), None
    return None, (
        f"no --etcd.metrics-url for host {host} (client URL {client_url}); "
        f"given: {', '.join(given)}"
    )
