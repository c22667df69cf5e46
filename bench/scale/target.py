"""A live fleet for Prometheus to scrape: N node targets and one cluster target, one port.

`GET /node/<i>` answers node i's exposition (the node template, values from synth's
fleet story at the current time); `GET /cluster` the cluster Deployment's. Prometheus
scrapes each path as its own target with the target labels a Kubernetes scrape config
gives (instance, job, node), so its memory, scrape loops and rule evaluation are those of a
real N-node fleet. asyncio keeps thousands of keep-alive connections on one thread.

    python -m bench.scale.target --nodes 7500 --port 9999 [--fleet thresholds]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np

from bench.scale import synth, template


class Fleet:
    def __init__(self, nodes: int, origin: float, story: str = synth.REALISTIC):
        self.node_t = template.load("node")
        self.cluster_t = template.load("cluster")
        self.nodes = nodes
        self.origin = origin
        self.story = story
        self._families = self._group(self.node_t.series)
        self._cluster_families = self._group(self.cluster_t.series)
        self._cache: dict[int, tuple[int, bytes]] = {}

    @staticmethod
    def _group(series):
        fams: dict[str, list] = {}
        for s in series:
            fams.setdefault(s.family, []).append(s)
        return fams

    @staticmethod
    def _labels(labels: dict[str, str]) -> str:
        return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""

    def _render(self, families, value_of, labels_of=lambda s: dict(s.labels)) -> bytes:
        lines = []
        for fam, series in families.items():
            kind = (
                series[0].kind
                if series[0].kind in ("gauge", "counter", "histogram", "summary")
                else "untyped"
            )
            # The text format names a counter's family by its sample name (with _total).
            name = series[0].name if kind == "counter" else fam
            lines.append(f"# HELP {name} {series[0].help}")
            lines.append(f"# TYPE {name} {kind}")
            for s in series:
                lines.append(
                    f"{s.name}{self._labels(labels_of(s))} {synth._fmt_value(float(value_of(s)))}"
                )
        return ("\n".join(lines) + "\n").encode()

    def body(self, path: str) -> bytes | None:
        bucket = int(time.time() // 15)
        t = np.array([bucket * 15 - self.origin], dtype=float)
        if path == "/cluster":
            return self._render(self._cluster_families, lambda s: synth.cluster_values(s, t)[0])
        if not path.startswith("/node/"):
            return None
        try:
            i = int(path[len("/node/") :])
        except ValueError:
            return None
        if not 0 <= i < self.nodes:
            return None
        cached = self._cache.get(i)
        if cached and cached[0] == bucket:
            return cached[1]
        roles = synth.Roles(i, self.story)
        body = self._render(
            self._families,
            lambda s: synth.node_values(s, roles, t)[0],
            lambda s: synth.node_series_labels(s, roles),
        )
        self._cache[i] = (bucket, body)
        return body


async def _serve(fleet: Fleet, host: str, port: int):
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        try:
            while True:
                request = await reader.readline()
                if not request:
                    break
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                parts = request.decode(errors="replace").split()
                body = fleet.body(parts[1].split("?")[0]) if len(parts) > 1 else None
                if body is None:
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                else:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                    )
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, host, port, backlog=4096)
    async with server:
        await server.serve_forever()


def scrape_configs(nodes: int, port: int, host: str = "127.0.0.1") -> list[dict]:
    """Prometheus scrape configs for the fleet: one target per node, as the DaemonSet's
    Kubernetes SD relabelling would label them, and the cluster Deployment."""
    groups = []
    for i in range(nodes):
        labels = synth.node_labels(i)
        groups.append(
            {
                "targets": [f"{host}:{port}"],
                "labels": {
                    "__metrics_path__": f"/node/{i}",
                    "instance": labels["instance"],
                    "node": labels["node"],
                },
            }
        )
    return [
        {"job_name": synth.NODE_JOB, "static_configs": groups},
        {
            "job_name": synth.CLUSTER_JOB,
            "metrics_path": "/cluster",
            "static_configs": [
                {
                    "targets": [f"{host}:{port}"],
                    "labels": {"instance": synth.CLUSTER_LABELS["instance"]},
                }
            ],
        },
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--origin", type=float, default=None, help="unix time the fleet story starts"
    )
    parser.add_argument("--fleet", choices=synth.FLEETS, default=synth.REALISTIC)
    args = parser.parse_args(argv)
    fleet = Fleet(
        args.nodes, args.origin if args.origin is not None else time.time() - 3600, args.fleet
    )
    asyncio.run(_serve(fleet, args.host, args.port))


if __name__ == "__main__":
    main()
