"""List pages decoded as they stream: kube/jsonstream.py beside ijson's C backend (yajl2_c).

    python -m bench.kube_json [--pods 2000] [--nodes 50] [--rounds 7]

Starts a real etcd + kube-apiserver (testbed), creates `--pods` pods shaped like real
ones (bench/kube_list.py) and records the list replies exactly as the exporter's client
receives them (KubeClient.stream: the pieces as read): the cluster-mode relist (pages of
limit=500) and one node's pods from the watch cache. Each decoder then runs in a fresh
interpreter on the same pieces:

- ours: kube/listing.py's decode() (jsonstream.Reader);
- ijson: ijson_decode() below, what listing.decode() would be with ijson.items_coro:
  items as they complete, the list's metadata (a second coroutine on the same pieces),
  and our caps counted per piece (MAX_ITEM_BYTES of text and MAX_OBJECT_VALUES since the
  last item, the page's item count);
- ijson, items alone (no metadata, so not enough to follow `continue`): the floor.

It reports CPU per relist (every page, each item kept as an informer keeps it, without
managedFields, the previous relist's gone first; median of `--rounds`), the decoder's own peak
memory above the items it hands on (tracemalloc), and RSS after import. Then hostile and
malformed pages, each decoder in its own interpreter under a 2 GiB address-space limit:
the endless pages of tests/kube/test_listing.py, arrays nested 10,000 and 100,000 deep
(20 and 200 KB, far under the 4 MiB item cap), and the malformed pages of the same test:
what each says, how long it took and its peak RSS.

Writes bench/results/kube_json.md.
"""

from __future__ import annotations

import argparse
import itertools
import pickle
import platform
import statistics
import tempfile
import time
from pathlib import Path

from bench import peers

RESULTS = peers.ROOT / "bench" / "results" / "kube_json.md"
IJSON = ("ijson", "3.6.0")
PAGE = 500
ADDRESS_SPACE = 2 << 30


def endless(head: bytes, piece: bytes):
    yield head
    while True:
        yield piece * (65536 // len(piece))


def nested(depth: int) -> list[bytes]:
    return [b'{"items":[' + b"[" * depth + b"]" * depth + b"]}"]


# Each a page's pieces.
HOSTILE = {
    "endless whitespace": lambda: endless(b'{"items":[', b" "),
    "endless string": lambda: endless(b'{"items":["', b"x"),
    "endless escapes": lambda: endless(b'{"items":[{"a":"', b"\\"),
    "endless tiny values": lambda: endless(b'{"items":[{"a":[', b"{},"),
    "endless items": lambda: endless(b'{"items":[', b'{"metadata":{"name":"x"}},'),
    "nested 10,000 deep (20 KB)": lambda: nested(10_000),
    "nested 100,000 deep (200 KB)": lambda: nested(100_000),
    "cut short": lambda: [b'{"items":[{"a":1}'],
    "a trailing comma": lambda: [b'{"items":[1,]}'],
    "no comma": lambda: [b'{"items":[1 2]}'],
    "items not a list": lambda: [b'{"items":{}}'],
    "data after the list": lambda: [b'{"items":[]} x'],
    "bad UTF-8": lambda: [b'{"items":["\xff"]}'],
    "a 5,000-digit number": lambda: [b'{"items":[' + b"1" * 5000 + b"]}"],
}


def ijson_decode(ijson, chunks, on_item, cap: tuple[int, str], what: str, metadata=True):
    """kube/listing.py's decode() done by ijson: on_item(item) for each item as its piece
    arrives; the list's metadata; ReplyTooLarge past our caps, ValueError when not JSON."""
    from kube_scale_exporter.kube.client import (  # noqa: PLC0415
        MAX_OBJECT_VALUES,
        ReplyTooLarge,
        count_values,
        too_many_values,
    )
    from kube_scale_exporter.kube.jsonstream import MAX_ITEM_BYTES  # noqa: PLC0415

    class Sink(list):
        send = list.append

    items, meta = Sink(), Sink()
    coros = [ijson.items_coro(items, "items.item", use_float=True)]
    if metadata:
        coros.append(ijson.items_coro(meta, "metadata", use_float=True))
    count = pending = values = 0
    try:
        for chunk in itertools.chain(chunks, [None]):  # None: the end
            if chunk is not None:
                # What the parser holds of an item not yet complete: bounded per piece.
                pending, values = pending + len(chunk), values + count_values(chunk)
                if pending > MAX_ITEM_BYTES:
                    raise ReplyTooLarge(f"{what}: a value over the 4 MiB cap (MAX_ITEM_BYTES)")
                if values > MAX_OBJECT_VALUES:
                    raise too_many_values(what)
            for coro in coros:
                coro.send(chunk) if chunk is not None else coro.close()
            if items:
                pending = values = 0
            for item in items:
                count += 1
                if count > cap[0]:
                    raise ReplyTooLarge(f"{what}: a page of more than {cap[0]} items ({cap[1]})")
                on_item(item)
            items.clear()
    except ijson.JSONError as exc:
        raise ValueError(f"{what}: not JSON: {exc}") from None
    return meta[0] if meta else {}


CHILD = r"""
import gc, json, pickle, resource, sys, time, tracemalloc
cfg = json.loads(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (cfg["address_space"], cfg["address_space"]))
RSS
from kube_scale_exporter.kube.listing import decode, strip_managed_fields
from kube_scale_exporter.kube.client import ReplyTooLarge
if cfg["side"] == "ours":
    rss_import = rss_mib()
    def run(chunks, on_item, cap):
        return decode(chunks, on_item, cap, "GET /x")
    from bench.kube_json import HOSTILE
else:
    import ijson
    assert ijson.backend == "yajl2_c", ijson.backend
    rss_import = rss_mib()
    from bench.kube_json import HOSTILE, ijson_decode
    metadata = cfg["side"] == "ijson"
    def run(chunks, on_item, cap):
        return ijson_decode(ijson, chunks, on_item, cap, "GET /x", metadata)
out = {"rss_import": rss_import}
if cfg["mode"] == "pages":
    with open(cfg["pages"], "rb") as f:
        pages = pickle.load(f)
    gc.freeze()  # the pages and the expected items: not the collector's work while timed
    def relist(keep):
        items, metas = [], []
        for page in pages["relist"]:
            metas.append(run(iter(page), lambda item: items.append(keep(item)), (cfg["page"], "limit")))
        return items, metas
    items, metas = relist(lambda item: item)
    same = items == pages["expected"]
    cpus = []
    for _ in range(cfg["rounds"]):
        items = metas = None  # the cache a relist replaces is gone before it: one at a time
        c = time.process_time()
        items, metas = relist(strip_managed_fields)  # what an informer keeps of each
        cpus.append((time.process_time() - c) * 1e3)
    whole = [b"".join(page) for page in pages["relist"]]
    loads = []
    for _ in range(cfg["rounds"]):
        c = time.process_time()
        for text in whole:
            json.loads(text)
        loads.append((time.process_time() - c) * 1e3)
    node = []
    c = time.process_time()
    run(iter(pages["node"]), node.append, (5000, "cap"))
    out.update(cpus=cpus, loads=loads, node_cpu=(time.process_time() - c) * 1e3, items=len(items),
               continues=[bool(m.get("continue")) for m in metas], node_items=len(node),
               same=same)
    del items, metas
    tracemalloc.start()
    peaks = []
    for page in pages["relist"]:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        run(iter(page), lambda item: None, (cfg["page"], "limit"))
        peaks.append((tracemalloc.get_traced_memory()[1] - base) / 2**20)
    out["decoder_peak_mib"] = max(peaks)
else:
    chunks = HOSTILE[cfg["hostile"]]()
    w = time.perf_counter()
    try:
        run(chunks, lambda item: None, (500, "limit=500 was asked"))
        said = "no error"
    except (ValueError, ReplyTooLarge, MemoryError, RecursionError) as exc:
        said = f"{type(exc).__name__}: {exc}"
    out.update(said=said, wall_ms=(time.perf_counter() - w) * 1e3)
out["peak_rss"] = peak_mib()
print(json.dumps(out))
"""


def record_pages(pods: int, nodes: int, into: Path) -> int:
    """The list replies as the exporter's client reads them, pickled into `into`; returns
    the pages' size in bytes."""
    import json  # noqa: PLC0415

    from bench.kube_list import create_pods  # noqa: PLC0415
    from kube_scale_exporter import kube  # noqa: PLC0415
    from testbed.kube_apiserver import apiserver_on_new_etcd  # noqa: PLC0415

    def pieces(path, params):
        return client.stream(path, params, lambda chunks: [bytes(c) for c in chunks])

    with tempfile.TemporaryDirectory(prefix="bench-json-") as tmp:
        with apiserver_on_new_etcd(tmp, etcd_quota_bytes=2 * 2**30) as api:
            create_pods(api, pods, nodes)
            client = kube.KubeClient(kube.load(api.write_kubeconfig(Path(tmp) / "kubeconfig")))
            relist, params = [], {"limit": str(PAGE)}
            while True:
                relist.append(pieces("/api/v1/pods", params))
                cont = json.loads(b"".join(relist[-1])).get("metadata", {}).get("continue")
                if not cont:
                    break
                params = {"limit": str(PAGE), "continue": cont}
            node = pieces(
                "/api/v1/pods", {"fieldSelector": "spec.nodeName=node-0", "resourceVersion": "0"}
            )
            version = client.get("/version")["gitVersion"]
            client.close()
    expected = [item for page in relist for item in json.loads(b"".join(page))["items"]]
    with open(into, "wb") as f:
        pickle.dump({"relist": relist, "node": node, "expected": expected}, f)
    return sum(len(p) for page in relist for p in page), version, relist


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=7)
    opts = ap.parse_args()
    ijson_dir = peers.install(*IJSON)
    code = CHILD.replace("RSS\n", peers.RSS_MIB)
    with tempfile.TemporaryDirectory(prefix="bench-json-") as tmp:
        pages = Path(tmp) / "pages.pickle"
        size, version, relist = record_pages(opts.pods, opts.nodes, pages)
        base = {
            "pages": str(pages),
            "page": PAGE,
            "rounds": opts.rounds,
            "address_space": ADDRESS_SPACE,
            "mode": "pages",
        }
        sides = ("ours", "ijson", "ijson, items alone")
        runs = {side: peers.run(code, dict(base, side=side), ijson_dir) for side in sides}
        hostile = {
            side: {
                name: _hostile(code, dict(base, side=side, mode="hostile", hostile=name), ijson_dir)
                for name in HOSTILE
            }
            for side in sides[:2]
        }
    print(runs, hostile, sep="\n")
    write(opts, size, version, relist, runs, hostile, peers.versions(ijson_dir)["ijson"])


def write(opts, size, version, relist, runs, hostile, ijson_version) -> None:
    from kube_scale_exporter.kube import jsonstream, listing  # noqa: PLC0415

    med = statistics.median
    ours, peer, floor = runs["ours"], runs["ijson"], runs["ijson, items alone"]
    pieces = [len(p) for page in relist for p in page]
    rows = [
        ("RSS after import, MiB", "rss_import", "{:.1f}"),
        (f"relist of {opts.pods} pods ({len(relist)} pages), CPU ms (median)", "cpu", "{:.1f}"),
        (f"node-mode list ({ours['node_items']} pods), CPU ms", "node_cpu", "{:.2f}"),
        ("decoder's peak memory for one page, MiB", "decoder_peak_mib", "{:.2f}"),
    ]
    for run in runs.values():
        run["cpu"] = med(run["cpus"])
    ours_lines = peers.code_lines(jsonstream) + sum(
        peers.code_lines(f) for f in (listing.decode, listing._list_object, listing._items)
    )
    lines = [
        f"# List pages decoded as they stream: kube/jsonstream.py beside ijson {ijson_version}",
        "",
        f"`python -m bench.kube_json` on {platform.node()} (Python "
        f"{platform.python_version()}); real kube-apiserver {version} on "
        f"etcd, {opts.pods} pods shaped like real ones on {opts.nodes} nodes; ours: "
        f"{peers.ours()}; peer: ijson "
        f"{ijson_version}, C backend yajl2_c. The pages as the exporter's client read them: "
        f"{size / 2**20:.1f} MiB in {len(pieces)} pieces (median {med(pieces) / 1024:.0f} KiB). "
        "Each decoder in a fresh interpreter on the same pieces; machine: 2 cores, shared.",
        "",
        "| measure | ours (jsonstream) | ijson (items + metadata) | ijson / ours | ijson, items alone |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, key, fmt in rows:
        a, b, c = ours[key], peer[key], floor[key]
        lines.append(
            f"| {name} | {fmt.format(a)} | {fmt.format(b)} | {b / a:.1f}x | {fmt.format(c)} |"
        )
    lines += [
        f"| lines of code | {ours_lines} | {peers.code_lines(ijson_decode)} | | |",
        "",
        "For scale: json.loads of each page held whole (not streamed, no caps) took "
        f"{med(ours['loads']):.1f} ms of CPU in the same process as ours.",
        "",
        f"Every side decoded the same {ours['items']} items as json.loads of each whole page: "
        f"ours {ours['same']}, ijson {peer['same']}, ijson items alone {floor['same']}. Lines: "
        "kube/jsonstream.py and listing.py's decode, _list_object and _items, against "
        "ijson_decode() in bench/kube_json.py.",
        "",
        "Hostile and malformed pages (each in its own interpreter under a "
        f"{ADDRESS_SPACE >> 30} GiB address-space limit; the endless ones are those of "
        "tests/kube/test_listing.py):",
        "",
        "| page | ours: what it says | ms | peak RSS MiB | ijson: what it says | ms | peak RSS MiB |",
        "|---|---|---:|---:|---|---:|---:|",
    ]
    for name in HOSTILE:
        a, b = hostile["ours"][name], hostile["ijson"][name]
        lines.append(
            f"| {name} | {_said(a)} | {a['wall_ms']:.0f} | {a['peak_rss']:.0f} | {_said(b)} "
            f"| {b['wall_ms']:.0f} | {b['peak_rss']:.0f} |"
        )
    peers.report(RESULTS, lines)


def _hostile(code, cfg, ijson_dir) -> dict:
    """One hostile page's run; a decoder that kills its process says so."""
    started = time.perf_counter()
    try:
        return peers.run(code, cfg, ijson_dir, timeout=300)
    except RuntimeError as exc:
        last = str(exc).strip().splitlines()[-1:] or ["no output"]
        wall = (time.perf_counter() - started) * 1e3
        return {"said": f"the process died: {last[0]}", "wall_ms": wall, "peak_rss": float("nan")}


def _said(run) -> str:
    said = " ".join(run["said"].split())
    said = (said[:90] + "...") if len(said) > 90 else said
    return said.replace("|", "\\|")


if __name__ == "__main__":
    main()
