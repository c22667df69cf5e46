"""The figures README.md and docs/ quote from measurements, held to the files they come from.

FIGURES is the one list: each entry names a doc, the words it quotes with `{}` where each
figure stands, the results file the figures come from and how to find them there. The test
renders the words with the figures the results file holds now and looks for them in the
doc, so it fails both ways: a figure edited in the doc alone, and a results file that a
bench re-ran while the doc kept the old figure. Its message says what the doc has at that
place. Whitespace and line breaks do not count; figures are rounded half up.

Sources are files of bench/results/, and docs/reliability.md's fault figures (what the
fault tests print at the end of a run; no bench writes them) where no results file has the
figure: those entries name RELIABILITY as their source. A figure quoted from a measurement
and missing here is not checked: add it when you quote one.

Series counts are counted, not measured: the README's are checked against
bench/scale/template.py (the collectors' golden expositions, what the bench synthesizes).
Alert names the docs mention are checked against rules/.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

from bench.scale import template
from kube_scale_exporter.budgets import CLUSTER_SERIES, COLLECTOR_SERIES, NODE_SERIES

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
RESULTS = "bench/results/"
RELIABILITY = "docs/reliability.md"  # its fault figures, where no results file has them
NODE_MEMORY = RESULTS + "node_memory.md"
SCRAPE_COST = RESULTS + "scrape_cost.md"
NEIGHBOR = RESULTS + "neighbor.md"
CLUSTER = RESULTS + "cluster_scale.md"  # the 7,500-node run
CLUSTER_500 = RESULTS + "cluster_scale_500.md"  # the 500-node one: rollout, events, relist
CHURN = RESULTS + "cluster_churn.md"
FLOOD = RESULTS + "capacitybuffer_flood.md"
LOAD = RESULTS + "load.md"
WEB_FLOOD = RESULTS + "web_flood.md"
WEB_IDLE = RESULTS + "web_idle.md"
WEB_SECURITY = RESULTS + "web_security.md"
EXPOSITION = RESULTS + "exposition.md"
KUBE_LIST = RESULTS + "kube_list.md"
KUBE_RBAC = RESULTS + "kube_rbac.md"
IMAGE = RESULTS + "image_size.md"
# Prometheus 3.16 at 7,500 nodes: the realistic fleet's every phase (memory, disk, dashboards,
# rule groups, evaluationTime), and the rule groups with every node at the alerts' thresholds.
SCALE = RESULTS + "scale.md"
SCALE_THRESHOLDS = RESULTS + "scale-thresholds.md"

Finder = Callable[[str], tuple[str, ...]]


# Reading the results: markdown tables and numbers as the bench reports print them.


def plain(text: str) -> str:
    return text.replace("**", "").replace("`", "").strip()


def squeeze(text: str) -> str:
    return " ".join(text.split())


def number(text: str) -> str:
    """The first number in `text`, as written."""
    m = re.search(r"-?\d[\d,]*(?:\.\d+)?", plain(text))
    if not m:
        raise AssertionError(f"no number in {text!r}")
    return m.group()


def num(text: str) -> Decimal:
    return Decimal(number(text).replace(",", ""))


def rounded(value: Decimal | float, spec: str) -> str:
    """`value` formatted by `spec` (".2f", ",.0f"), rounded half up as people round."""
    value = value if isinstance(value, Decimal) else Decimal(repr(value))
    places = int(re.fullmatch(r",?\.(\d+)f", spec).group(1))
    return format(value.quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP), spec)


def fmt(text: str, spec) -> str:
    """None: as written; "n": the number as written; a format spec; or a function of it."""
    if spec is None:
        return plain(text)
    if spec == "n":
        return number(text)
    if callable(spec):
        return spec(num(text))
    return rounded(num(text), spec)


def seconds(spec: str) -> Callable[[Decimal], str]:
    """A figure in ms, written in seconds."""
    return lambda ms: rounded(ms / 1000, spec)


def span(values, spec: str) -> str:
    return f"{rounded(min(values), spec)}-{rounded(max(values), spec)}"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def tables(text: str):
    """(header, rows) of every markdown table, each row a list of cells."""
    lines = text.splitlines()
    for i in range(len(lines) - 1):
        if lines[i].startswith("|") and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1]):
            rows = []
            for line in lines[i + 2 :]:
                if not line.startswith("|"):
                    break
                rows.append(_cells(line))
            yield [plain(c) for c in _cells(lines[i])], rows


def _matches(text: str, want: str) -> bool:
    """`want` exactly, or, ending in `*`, as a prefix (markdown emphasis left out)."""
    text = plain(text)
    return text.startswith(want[:-1]) if want.endswith("*") else text == want


def rows_of(text: str, column: str, first: str = "*"):
    """The rows, as {header: cell}, of every table with `column`, whose first cell is `first`."""
    for header, rows in tables(text):
        if any(_matches(h, column) for h in header):
            for row in rows:
                if _matches(row[0], first):
                    yield dict(zip(header, row, strict=False))


def _in(named: dict, column: str) -> str:
    (key,) = [h for h in named if _matches(h, column)]
    return named[key]


# Finders: each takes the source's text and gives the figures as the doc writes them.


def cell(row: str, column: str, spec="n", where: tuple[str, str] | None = None) -> Finder:
    """The one cell in `column` of the one row whose first cell is `row` (and whose cell in
    `where[0]` is `where[1]`)."""

    def find(text):
        found = [
            _in(named, column)
            for named in rows_of(text, column, row)
            if where is None or _matches(named[where[0]], where[1])
        ]
        assert len(found) == 1, f"row {row!r}, column {column!r}: {len(found)} cells"
        return (fmt(found[0], spec),)

    return find


def total(column: str, spec, interval: str | None = None) -> Finder:
    """A bench.scale report's column summed over its groups (those of one interval)."""

    def find(text):
        values = [
            num(_in(named, column))
            for named in rows_of(text, column, "kube-scale-exporter-*")
            if interval is None or named.get("interval") == interval
        ]
        assert values, f"no groups for {column!r} at {interval!r}"
        return (rounded(sum(values) if spec is None else spec(sum(values)), ".2f"),)

    return find


def all_groups(column: str) -> Finder:
    """A bench.scale report's "all groups" row, in seconds."""
    return cell("all groups", column, seconds(".2f"))


def rx(pattern: str, *specs) -> Finder:
    """The groups of the one match of `pattern` in the squeezed text, each by its spec."""

    def find(text):
        matches = list(re.finditer(pattern, squeeze(text)))
        assert len(matches) == 1, f"{pattern!r}: {len(matches)} matches"
        groups = matches[0].groups()
        return tuple(fmt(g, specs[i] if i < len(specs) else None) for i, g in enumerate(groups))

    return find


def of(*finders: Finder) -> Finder:
    return lambda text: tuple(v for f in finders for v in f(text))


def elsewhere(path: str, finder: Finder) -> Finder:
    """A finder over another file than the figure's source (a second source)."""
    return lambda _text: finder((ROOT / path).read_text())


def rule_cpu_per_30s(text):
    """The sum of the groups' "CPU per 30 s" over each interval, in s: 30 s, 120 s, 240 s."""
    return tuple(
        v
        for interval in ("30 s", "120 s", "240 s")
        for v in total("CPU per 30 s", lambda ms: ms / 1000, interval)(text)
    )


FLOOR = r"about \*\*(\d+) ms\*\* of the total per 30 s is that floor"


def query_floor_ms(text):
    """The HTTP API's CPU per query in both rule-group runs, in ms: one figure or a span."""
    found = [
        num(rx(r"`count\(vector\(1\)\)`, measured the same way, took ([\d.]+) ms")(t)[0])
        for t in (text, (ROOT / SCALE_THRESHOLDS).read_text())
    ]
    return (first_or_range(found, ".1f"),)


def floor_per_30s(text):
    """That floor's share of the rules' CPU per 30 s in both runs, in s: one figure."""
    found = [num(rx(FLOOR)(t)[0]) / 1000 for t in (text, (ROOT / SCALE_THRESHOLDS).read_text())]
    return (first_or_range(found, ".2f"),)


def per_30s(text) -> Decimal:
    return num(cell("all groups", "CPU per 30 s")(text)[0]) / 1000


# bench.scale's live paragraph: Prometheus' own rule evaluation, from its profiles.
PROFILED_PER_30S = rx(
    r"\*\*([\d.]+) CPU-s per 30 s\*\*(?: \(the cycles one by one: [^)]*\))? against"
)


def profiled_per_30s(text):
    """The live paragraph's figures per 30 s: rule evaluation, of it the alerts' templates,
    the GC's share and the bytes' percentage it was given by."""
    seconds = num(rx(r"Over (\d+) s of the live run")(text)[0])
    evaluation = num(rx(r"CPU profile put ([\d.]+) CPU-s on rule evaluation")(text)[0])
    templates = num(rx(r"in the rules' queries and ([\d.]+) expanding")(text)[0])
    gc, share = rx(r"\([\d.]+ CPU-s\) ([\d.]+) more, its share of the bytes allocated \((\d+%)\)")(
        text
    )

    def per_30s(x):
        return rounded(x * 30 / seconds, ".2f")

    return per_30s(evaluation), per_30s(templates), per_30s(num(gc)), share


PROFILED_TEMPLATES = rx(
    r"of the ([\d.]+), [\d.]+ in the rules' queries and ([\d.]+) expanding", ".1f", ".1f"
)


def live_seconds(group: str) -> Finder:
    """A group's own last evaluationTime in the live run, in s."""
    return cell(f"kube-scale-exporter-{group}", "Prometheus last", seconds(".2f"))


def thresholds_more(text):
    """What every node at the thresholds adds to the rules per 30 s, and its total, in s."""
    worst = per_30s((ROOT / SCALE_THRESHOLDS).read_text())
    return rounded(worst - per_30s(text), ".2f"), rounded(worst, ".2f")


def group_seconds(group: str, spec: str) -> Finder:
    return cell(f"kube-scale-exporter-{group}", "CPU (blocks)", seconds(spec))


def slowest_live_group(text, spec: Callable[[Decimal], str] | None = None):
    """The live run's group whose own last evaluation took longest: the time (in s unless
    `spec` formats the ms), the group."""
    last, name = max(
        (num(n["Prometheus last"]), plain(n["group"]))
        for n in rows_of(text, "Prometheus last", "kube-scale-exporter-*")
    )
    return (spec or seconds(".2f"))(last), name.removeprefix("kube-scale-exporter-")


def heaviest_panel(text):
    """The fit run's heaviest panel projected to 7,500 nodes, and the most series a panel
    returns, topk-capped tables aside; then the most rows such a table shows."""
    panels = [n for n in rows_of(text, "samples 7,500 proj.", "panel")]
    samples = max(num(n["samples 7,500 proj."]) for n in panels)
    series = max(
        num(n["series 7,500 proj."])
        for n in panels
        if n["series 7,500 proj."] and "topk" not in n["series 7,500 proj."]
    )
    section = text.split("## topk-capped tables", 1)[1].split("\n## ", 1)[0]
    topk = [int(n) for n in re.findall(r"^- .*: (\d+)$", section, re.M)]
    return rounded(samples, ",.0f"), rounded(series, ".0f"), str(max(topk))


def node_panel_samples(text):
    node = [
        num(n["samples N1"])
        for n in rows_of(text, "samples N1", "panel")
        if n["group"] == "kubescale-node"
    ]
    return (rounded(max(node), ",.0f"),)


def fault_seconds(text):
    """docs/reliability.md's node faults: how soon the failing collector reported 0."""
    column = "failing collector reports 0"
    within = [num(n[column]) for n in rows_of(text, column) if "within" in n[column]]
    return (span(within, ".1f"),)


def pull_events(text):
    return (rounded(sum(num(n["sent"]) for n in rows_of(text, "sent")), ",.0f"),)


def arp_cpu_ratio(text):
    ours, arp = (
        num(cell(row, "CPU ms/scrape")(text)[0])
        for row in ("kube-scale-exporter", "node_exporter (arp)")
    )
    return (rounded(arp / ours, ".0f"),)


def flood_first_scrape(text):
    ours = [
        num(n[c])
        for n in rows_of(text, "median s", "kube-scale-exporter")
        for c in ("median s", "slowest 200 s")
    ]
    return (span(ours, ".1f"),)


def idle_kib(text):
    def kib(server):
        return [num(n["KiB per conn"]) for n in rows_of(text, "KiB per conn", server)]

    return span(kib("before"), ".0f"), span(kib("node_exporter"), ".0f"), str(min(kib("this tree")))


def peer(name: str, release: bool = False) -> Finder:
    """The one version of peer `name` (node_exporter, kube-state-metrics) a results file names:
    major.minor, or with `release` the whole version."""

    def find(text):
        found = set(re.findall(rf"{name},? (?:version )?v?(\d+\.\d+)(\.\d+)", text))
        assert len(found) == 1, f"{name}: versions {sorted(found)}"
        ((minor, patch),) = found
        return (minor + patch if release else minor,)

    return find


def first_or_range(values, spec: str) -> str:
    """One figure when the least and the most round alike, else their span."""
    low, high = rounded(min(values), spec), rounded(max(values), spec)
    return low if low == high else f"{low}-{high}"


def flood_peer(text):
    """node_exporter's probes behind 16 guessers and behind 100 (median and slowest), in s."""

    def probes(flood):
        return [
            num(n[c])
            for n in rows_of(text, "median s", "node_exporter*")
            if n["flood"].startswith(f"{flood} from")
            for c in ("median s", "slowest 200 s")
        ]

    return span(probes(16), ".1f"), span(probes(100), ".1f")


def idle_row(server: str, conn: str, latencies=("/metrics", "/healthz", "churn: /healthz")):
    """A bench.web_idle row: sockets, RSS before and with them, KiB, threads, then each
    latency's p50 and max (the max is the column after its p50: three are named "max ms")."""

    def find(text):
        for header, rows in tables(text):
            if "KiB per conn" not in header:
                continue
            (row,) = [r for r in rows if plain(r[0]) == server and plain(r[1]) == conn]
            at = header.index
            values = [
                fmt(row[at("sockets held")], ",.0f"),
                fmt(row[at("RSS before MiB")], ",.1f"),
                fmt(row[at("RSS with them MiB")], ",.1f"),
                fmt(row[at("KiB per conn")], "n"),
                fmt(row[at("threads")], ",.0f"),
            ]
            for name in latencies:
                i = at(f"{name} p50 ms")
                values += [fmt(row[i], ",.1f"), fmt(row[i + 1], ",.1f")]
            return tuple(values)
        raise AssertionError("no bench.web_idle table")

    return find


def load_run(text):
    """bench.load: RSS growth over the first 10k scrapes, scrapes after them, scrapes a second."""
    scrapes = num(cell("kube-scale-exporter", "scrapes")(text)[0])
    (seconds_,) = rx(r"scrapers for (\d+) s")(text)
    grew = num(cell("kube-scale-exporter", "RSS @10k MiB")(text)[0]) - num(
        cell("kube-scale-exporter", "RSS start MiB")(text)[0]
    )
    return (
        rounded(grew, ".1f"),
        rounded(scrapes - 10000, ",.0f"),
        rounded(scrapes / Decimal(seconds_), ".0f"),
    )


def load_span(spec: str = ".0f") -> Finder:
    """A bench's 1-minute load average at its start and end, least to most."""

    def find(text):
        loads = rx(r"load average ([\d.]+) at the start, ([\d.]+) at the end")(text)
        return (first_or_range([Decimal(v) for v in loads], spec),)

    return find


def cluster_phase(phase: str, column: str) -> Finder:
    """A bench.cluster_scale phase's CPU s per minute in one column; `phase` is a pattern for
    the row's label, which carries the phase's size or rate."""

    def find(text):
        (named,) = [
            n
            for n in rows_of(text, column)
            if re.fullmatch(rf"{phase}: CPU s per minute", plain(n[""]))
        ]
        return (fmt(named[column], "n"),)

    return find


def balloon_cost(text):
    """CPU per scrape of the every-pod exporter and the Deployment, and the difference per pod."""
    every, deploy = (
        num(cell("CPU ms per scrape", column, ".1f")(text)[0]) for column in (EVERY_POD, DEPLOY)
    )
    pods = num(rx(r"# Cluster mode at \d+ nodes and (\d+) pods")(text)[0])
    per_pod = rounded((every - deploy) * 1000 / pods, ".1f")
    rss = (cell(AT_REST_RSS, column, ".1f")(text)[0] for column in (EVERY_POD, DEPLOY))
    count = rounded(pods, ",.0f")
    return per_pod, str(every), count, str(deploy), str(every), str(deploy), count, *rss


def apiserver_window_swing(text):
    """bench.cluster_scale: the most the API server's CPU per minute moved between two
    successive windows at rest (each with one watcher more)."""
    cpu = [num(n["CPU s per minute"]) for n in rows_of(text, "its start: API server CPU s")]
    return (rounded(max(abs(b - a) for a, b in zip(cpu, cpu[1:], strict=False)), ".1f"),)


def deploy_rest_range(text):
    """bench.cluster_scale's log: the Deployment's MiB read and CPU-s per minute in each
    window at rest, lowest and highest (the Node status waves pass some windows by)."""
    windows = [
        json.loads(line.split(": ", 1)[1])[DEPLOY]
        for line in text.split("\n## Log", 1)[1].splitlines()
        if re.match(r"\d\d:\d\d:\d\d rest, \+ ", line)
    ]
    read = [w["read_mib_per_min"] for w in windows]
    cpu = [w["cpu_s_per_min"] for w in windows]
    return (
        rounded(min(read), ".2f"),
        rounded(max(read), ".2f"),
        rounded(min(cpu), ".2f"),
        rounded(max(cpu), ".2f"),
    )


def ksm_samples_over_ours(text):
    """kube-state-metrics' samples (defaults) over the Deployment's, to the hundred."""
    ksm, ours = (num(cell("samples", column)(text)[0]) for column in (KSM, DEPLOY))
    return (f"{int(rounded(ksm / ours / 100, '.0f')) * 100:,}",)


def neighbor_dump(row: str) -> Finder:
    """A bench.neighbor floor row as docs/neighbor.md has it: floor wall (CPU), ours wall
    (CPU), ours / floor (CPU)."""
    pattern = (
        rf"\| {row} \| ([\d.]+) / [\d.]+ \| ([\d.]+) / [\d.]+ \| ([\d.]+)x / [\d.]+x \| "
        r"([\d.]+) / ([\d.]+) \(([\d.]+)x\)"
    )

    def find(text):
        wall, ours, ratio, cpu_floor, cpu_ours, cpu_ratio = rx(
            pattern, ".1f", ".1f", "n", ".1f", ".1f", "n"
        )(text)
        return wall, cpu_floor, ours, cpu_ours, ratio, cpu_ratio

    return find


def neighbor_over_floor(text):
    """CPU over the floor: the one-layout dump's in ms, the mixed dump's per entry in us."""

    def cpu(row):
        pattern = rf"\| {row} \|[^|]+\|[^|]+\|[^|]+\| ([\d.]+) / ([\d.]+) \("
        floor, ours = (Decimal(v) for v in rx(pattern, "n", "n")(text))
        return ours - floor

    return rounded(cpu("dump, one layout"), ".0f"), rounded(cpu("dump, mixed layouts") / 110, ".2f")


def security_cpu(text):
    """bench.web_security: CPU per keep-alive scrape, ours and node_exporter's, over configs."""
    return tuple(
        first_or_range(
            [num(n["CPU ms/scrape"]) for n in rows_of(text, "CPU ms/scrape", row)], ".2f"
        )
        for row in ("kube-scale-exporter", "node_exporter*")
    )


def security_tls(text):
    """bench.web_security: the first scrape with basic auth (one bcrypt), then a new TLS
    connection's CPU, ours and node_exporter's."""
    column = "new-connection CPU ms"
    bcrypt = tuple(
        cell(row, "first scrape ms", ".0f", where=("config", "tls+basic auth"))(text)[0]
        for row in ("kube-scale-exporter", "node_exporter*")
    )
    tls = tuple(
        first_or_range(
            [num(n[column]) for n in rows_of(text, column, row) if n["config"].startswith("tls")],
            ".1f",
        )
        for row in ("kube-scale-exporter", "node_exporter*")
    )
    return bcrypt + tls


def encode_ratios(text, formats=("*",)):
    """prometheus_client's CPU to encode over ours: the least and the most, for each format."""
    column = "prometheus_client / ours"
    return tuple(
        v
        for f in formats
        for ratios in [
            [
                num(n[column])
                for n in rows_of(text, column, "CPU to encode*")
                if _matches(n["measure"].split(", ")[1], f)
            ]
        ]
        for v in (rounded(min(ratios), ".1f"), rounded(max(ratios), ".1f"))
    )


def apiserver_watch_cost(text):
    """The 7,500-watch run (the file's first table; a 500-watch run follows)."""
    text = text.split("\n## ", 1)[0]

    def pair(row):
        before, after = (
            Decimal(x) for x in re.findall(r"[\d.]+", cell(row, "value", None)(text)[0])
        )
        return after - before

    return (
        *cell("API server heap + stacks per watch, KiB", "value", ".0f")(text),
        *rx(r"with idle connections \(per connection\) \| \d+ / \d+ \(([\d.]+)\)", ".0f")(text),
        *cell("API server RSS per watch, KiB", "value", ".0f")(text),
        rounded(pair("API server Go heap + stacks in use without / with the watches, MiB"), ".0f"),
        rounded(pair("API server RSS without / with, MiB"), ".0f"),
        str(pair("API server CPU at rest without / with the watches, cores")),
    )


def api_restart(text):
    """The 7,500-watch run's API server restart: the last relist, s, and the CPU-s the new
    API server and the watchers used until then."""
    text = text.split("\n## ", 1)[0]
    relists = cell("... each relist after the new API server started*", "value", None)(text)[0]
    cpu = cell("... CPU from the restart to the last relist*", "value", None)(text)[0]
    api, watchers = (x.strip() for x in cpu.split("/"))
    return relists.split("/")[-1].strip(), watchers, api, api


def image_sizes(text):
    def size(image, column, spec):  # the image's row of all its layers
        return cell(image, column, spec, where=("layer", "all*"))(text)[0]

    ours = "kube-scale-exporter, ./Dockerfile*"
    return (
        size(ours, "uncompressed MB", ".0f"),
        size(ours, "gzip MB", ".0f"),
        *rx(r"pulls (\d+) GB \(gzip'd layers\) of ours")(text),
        size(ours, "gzip MB", "n"),
        *peer("node_exporter")(text),
        size("node_exporter binary*", "uncompressed MB", ".0f"),
        *peer("kube-state-metrics")(text),
        size("kube-state-metrics binary*", "uncompressed MB", ".0f"),
    )


def node_target(text):
    """bench.node_memory's target for the default node pod, and whether the run met it."""
    target, verdict = rx(
        r"Target: the default node pod at most (\d+) MiB after 10,000 scrapes: "
        r"[\d.]+ MiB (met|MISSED)"
    )(text)
    return target, verdict.lower()


def same_peer(*paths: str) -> Finder:
    """node_exporter's major.minor, the same in each of `paths` (benches quoted together)."""

    def find(_text):
        (version,) = {peer("node_exporter")((ROOT / path).read_text()) for path in paths}
        return version

    return find


@dataclass(frozen=True)
class Figure:
    doc: str  # from the repository's root
    quote: str  # the doc's words, `{}` for each figure
    source: str  # the file the figures come from
    find: Finder  # the figures, as the doc writes them, from the source's text

    def __str__(self):
        return f"{self.doc}: {self.quote[:60]!r}"


IMAGE_ROW = "the default node pod in its image*"
VENV_ROW = "the default node pod: the above*"
NO_WATCH_ROW = "neighbor, neighbor_gc, imagepull*"
OURS_SCRAPE = "kube-scale-exporter, the default node pod*"
RSS_LAST = "RSS after the last MiB"
SIDECAR_RSS = "RSS of the pod's processes after the scrapes, MiB"
SIDECAR_CPU = "CPU per scrape, ms (all the pod's processes)"
REVIEWS_1M = "in process, --web.kube-rbac.cache-ttl 1m (default)"
REVIEWS_5M = "in process, --web.kube-rbac.cache-ttl 5m"
AT_REST_RSS = "at rest: RSS at its end, MiB"
LIVE_RSS = "RSS (VmRSS, max of 6 readings)"
LIVE_HEAP = "Go heap in use (median)"
PER_SERIES = r"Per added head series: ([\d,]+) bytes RSS, ([\d,]+) bytes heap"
DISK = r"needs about ([\d.]+) GiB of disk"
DEPLOY, EVERY_POD, KSM, KSM_PODS = (
    "exporter (deploy)",
    "exporter (every pod)",
    "ksm (defaults)",
    "ksm (pods,nodes)",
)

# The cluster Deployment's CPU per scrape, kube-state-metrics' with its defaults, the ratio.
DEPLOY_VS_KSM = of(
    cell("CPU ms per scrape", DEPLOY, ".1f"),
    cell("CPU ms per scrape", KSM, ",.0f"),
    rx(r"ksm \(defaults\) / exporter \(deploy\) ([\d.]+)x", ".1f"),
)

FIGURES = [
    # README.md: Sizing
    Figure(
        "README.md",
        "+{} MiB RSS for {} head series ({} bytes each)",
        SCALE,
        of(cell(LIVE_RSS, "added"), cell("head series", "added"), lambda t: rx(PER_SERIES)(t)[:1]),
    ),
    Figure("README.md", "before compaction | about {} GiB", SCALE, rx(DISK)),
    Figure(
        "README.md",
        "{} samples, at most {} series (topk tables at most {} rows)",
        SCALE,
        heaviest_panel,
    ),
    Figure(
        "README.md",
        "| rules and alerts, Prometheus CPU per 30 s | {} s: {} s in the 30 s groups, {} s in the "
        "per-node alerts' 2 min ones, {} s in the 4 min ones (heaviest group: "
        "imagepull-views.rules {} s every 4 min); about {} s of it is the bench's own HTTP "
        "queries. Every node at the alerts' thresholds: {} s. Live, in Prometheus' own "
        "evaluation (its CPU profile): {} s; every node at the thresholds {} s, most of it "
        "expanding the firing alerts' annotations |",
        f"{SCALE}, {SCALE_THRESHOLDS}",
        of(
            all_groups("CPU per 30 s"),
            rule_cpu_per_30s,
            group_seconds("imagepull-views.rules", ".2f"),
            rx(FLOOR, seconds(".2f")),
            elsewhere(SCALE_THRESHOLDS, all_groups("CPU per 30 s")),
            PROFILED_PER_30S,
            elsewhere(SCALE_THRESHOLDS, PROFILED_PER_30S),
        ),
    ),
    Figure(
        "README.md",
        "evaluation time was at most {} s for a group ({})",
        SCALE,
        slowest_live_group,
    ),
    Figure(
        "README.md",
        "The exporter itself, beside node_exporter {} with its default collectors on the same "
        "host:",
        NODE_MEMORY,
        same_peer(NODE_MEMORY, SCRAPE_COST),
    ),
    Figure(
        "README.md",
        "the default node pod {} MiB RSS after 10,000 scrapes",
        NODE_MEMORY,
        cell(IMAGE_ROW, RSS_LAST),
    ),
    Figure(
        "README.md",
        "(neighbor collectors alone {}; node_exporter {}; target {}, {})",
        NODE_MEMORY,
        of(cell("neighbor, neighbor_gc", RSS_LAST), cell("node_exporter*", RSS_LAST), node_target),
    ),
    Figure(
        "README.md",
        "and {} ms of CPU per scrape, {}x less than node_exporter's",
        SCRAPE_COST,
        of(
            cell(OURS_SCRAPE, "CPU ms / scrape", ".1f"),
            rx(r"node_exporter / ours: ([\d.]+)x CPU per scrape", ".1f"),
        ),
    ),
    Figure(
        "README.md",
        "the neighbor table read in {} ms whatever its size ({}x a bare netlink request), and "
        "the dump of 100,000 entries at {}x the kernel's own floor, {}x faster than "
        "node_exporter {}'s arp collector",
        NEIGHBOR,
        of(
            rx(
                r"\| table \(O\(1\)\) \| [\d.]+ / [\d.]+ \| ([\d.]+) / [\d.]+ \| ([\d.]+)x",
                ".2f",
                ".1f",
            ),
            rx(r"Our read alone against its floor: median ([\d.]+)x"),
            rx(r"node_exporter's arp collector / ours: ([\d.]+)x \(`neighbor_gc`\)"),
            peer("node_exporter"),
        ),
    ),
    Figure(
        "README.md",
        "The cluster Deployment on a kwok fleet of {} nodes and {} pods, beside kube-state-metrics "
        "v{} on the same cluster",
        CLUSTER,
        of(
            rx(r"# Cluster mode at (\d+) nodes and (\d+) pods", ",.0f", ",.0f"),
            peer("kube-state-metrics", release=True),
        ),
    ),
    Figure(
        "README.md",
        "{} ms of CPU per scrape against its {} ms with its defaults ({}x; {} samples against "
        "{}), {} MiB RSS at rest against {}",
        CLUSTER,
        of(
            DEPLOY_VS_KSM,
            cell("samples", DEPLOY),
            cell("samples", KSM),
            cell(AT_REST_RSS, DEPLOY, ".0f"),
            cell(AT_REST_RSS, KSM, ",.0f"),
        ),
    ),
    Figure(
        "README.md",
        "on the same pods and nodes {} MiB against {} ({}x less; the target was 3x)",
        CLUSTER,
        of(
            cell(AT_REST_RSS, EVERY_POD, ".0f"),
            cell(AT_REST_RSS, KSM_PODS, ",.0f"),
            cell("rest, all four: rss_mib", f"{KSM_PODS} / {EVERY_POD}", ".1f"),
        ),
    ),
    Figure(
        "README.md",
        "| the cluster Deployment at {} nodes and {} pods (kwok), beside kube-state-metrics v{} | "
        "{} MiB RSS at rest, {} ms CPU per scrape; ksm's defaults {} MiB and {} ms",
        CLUSTER,
        of(
            rx(r"# Cluster mode at (\d+) nodes and (\d+) pods", ",.0f", ",.0f"),
            peer("kube-state-metrics", release=True),
            cell(AT_REST_RSS, DEPLOY, ".0f"),
            cell("CPU ms per scrape", DEPLOY, ".1f"),
            cell(AT_REST_RSS, KSM, ",.0f"),
            cell("CPU ms per scrape", KSM, ",.0f"),
        ),
    ),
    Figure(
        "README.md",
        "every one of {} pull events in 120 s counted",
        CLUSTER_500,
        pull_events,
    ),
    # README.md: Reliability
    Figure(
        "README.md",
        "{} scrapes, {} failed, {} ms CPU per scrape, RSS {} → {} MiB after 10k scrapes → {} MiB "
        "at the end",
        LOAD,
        of(
            cell("kube-scale-exporter", "scrapes", ",.0f"),
            cell("kube-scale-exporter", "failed"),
            cell("kube-scale-exporter", "CPU ms/scrape", ".1f"),
            cell("kube-scale-exporter", "RSS start MiB"),
            cell("kube-scale-exporter", "RSS @10k MiB"),
            cell("kube-scale-exporter", "RSS end MiB"),
        ),
    ),
    Figure(
        "README.md",
        "node_exporter {}'s arp collector under the same load: {} scrapes at {} s each, {}x our "
        "CPU per scrape, {} MiB RSS",
        LOAD,
        of(
            peer("node_exporter", release=True),
            cell("node_exporter (arp)", "scrapes"),
            cell("node_exporter (arp)", "p50 ms", seconds(".1f")),
            arp_cpu_ratio,
            cell("node_exporter (arp)", "RSS end MiB", ".0f"),
        ),
    ),
    Figure("README.md", "reports 0 within its timeout ({} s)", RELIABILITY, fault_seconds),
    Figure(
        "README.md",
        "the watch {} s after a restarted API server is ready",
        RELIABILITY,
        rx(r"watch_up 1 ([\d.]+-[\d.]+) s after the server is ready"),
    ),
    Figure(
        "README.md",
        "exit 0 in {} s with every watch open, {} s with a scrape stuck on frozen etcd and "
        "containerd, {} s with a re-watch hung (closing waits at most {} s",
        RELIABILITY,
        of(
            rx(
                r"SIGTERM: exit status 0 in ([\d.]+-[\d.]+) s with every watch open; ([\d.]+) s "
                r"in node mode with a scrape stuck on frozen etcd and containerd \(their 1 s "
                r"timeouts\); ([\d.]+) s with a re-watch hung"
            ),
            rx(r"waits at most (\d+) s in all \(`CLOSE_SECONDS`\)"),
        ),
    ),
    Figure(
        "README.md",
        "within {} s with 2,000 idle TLS connections held",
        RELIABILITY,
        rx(r"SIGTERM with 2,000 idle TLS connections held: exit 0 within ([\d.]+) s"),
    ),
    Figure(
        "README.md",
        "a valid scraper's first scrape is answered in {} s (node_exporter {}: {} s behind 16, {} "
        "s behind 100;",
        WEB_FLOOD,
        of(flood_first_scrape, peer("node_exporter", release=True), flood_peer),
    ),
    Figure(
        "README.md",
        "(a thread per connection costs a thread and {} KiB each; node_exporter: {} KiB each; "
        "ours: {} KiB plain",
        WEB_IDLE,
        idle_kib,
    ),
    # README.md: the image and the design notes
    Figure(
        "README.md",
        "{} MB uncompressed and {} MB gzip'd, so **a rollout to 7,500 nodes pulls about {} GB** "
        "({} MB times 7,500). node_exporter {}'s binary alone is {} MB, kube-state-metrics {}'s "
        "{} MB",
        IMAGE,
        image_sizes,
    ),
    Figure(
        "README.md",
        "takes {} s of CPU and {} MiB to decode a 100,000-entry dump that ours reads in {} ms "
        "and {} MiB",
        RESULTS + "neighbor_pyroute2.md",
        of(
            cell("dump of 100,000 entries, CPU ms (median)", "pyroute2", seconds(".1f")),
            cell("peak RSS, MiB", "pyroute2", ".0f"),
            cell("dump of 100,000 entries, CPU ms (median)", "kube-scale-exporter*"),
            cell("peak RSS, MiB", "kube-scale-exporter*"),
        ),
    ),
    Figure(
        "README.md",
        "{} ms of CPU per relist of 2,000 pods against {} and {}, {} MiB after import against "
        "{} and {}",
        KUBE_LIST,
        of(
            *(
                cell(row, column, spec)
                for row, spec in (
                    ("relist of 2000 pods, CPU ms (median)", ",.0f"),
                    ("RSS after import, MiB", "n"),
                )
                for column in ("kube-scale-exporter", "kubernetes client", "lightkube")
            )
        ),
    ),
    Figure(
        "README.md",
        "with {}x less CPU than ijson's C backend",
        RESULTS + "kube_json.md",
        cell("relist of 2000 pods (4 pages), CPU ms (median)", "ijson / ours", ".1f"),
    ),
    Figure(
        "README.md",
        "node pod the sidecar's {} MiB ({} GiB over 7,500 nodes) and {} ms of CPU a scrape",
        KUBE_RBAC,
        of(
            cell(SIDECAR_RSS, "sidecar - in process"),
            rx(r"at 7,500 nodes the difference is (\d+) GiB"),
            cell(SIDECAR_CPU, "sidecar - in process", ".2f"),
        ),
    ),
    Figure(
        "README.md",
        "{}x less CPU per request, {} instead of {} KiB per idle connection",
        RESULTS + "web_parse.md",
        of(
            cell("CPU per request (framed, parsed, answered), us", "h11 / ours", ".1f"),
            cell("memory per idle connection, KiB", "ours"),
            cell("memory per idle connection, KiB", "h11"),
        ),
    ),
    Figure(
        "README.md",
        "{} MiB less at import ({} MiB over the default node pod's imports",
        EXPOSITION,
        of(
            cell("RSS of import kube_scale_exporter.cli, MiB", "prometheus_client - ours", ".1f"),
            cell("RSS of the default node pod's imports*", "prometheus_client - ours", ".1f"),
        ),
    ),
    Figure("README.md", "{}-{}x less CPU to encode", EXPOSITION, encode_ratios),
    # docs/sizing.md: memory, disk, rule groups, dashboards
    Figure(
        "docs/sizing.md",
        "| head series | {} | {} | {} | | RSS | {} MiB | {} MiB | **{} MiB** ({} KB per series) | "
        "| Go heap in use | {} MiB | {} MiB | {} MiB ({} KB per series) |",
        SCALE,
        of(
            *(cell("head series", c) for c in ("baseline*", "with the fleet", "added")),
            *(cell(LIVE_RSS, c) for c in ("baseline*", "with the fleet", "added")),
            lambda t: rx(PER_SERIES, seconds(".1f"))(t)[:1],
            *(cell(LIVE_HEAP, c) for c in ("baseline*", "with the fleet", "added")),
            lambda t: rx(PER_SERIES, None, seconds(".1f"))(t)[1:],
        ),
    ),
    Figure(
        "docs/sizing.md",
        "took {} bytes per raw sample: a day of 7,500 nodes ({} raw series per node every 30 s) "
        "is about **{} GiB of disk**",
        SCALE,
        of(
            rx(r"([\d.]+) bytes per raw sample"),
            rx(
                r"a day of 7,500 nodes \(([\d,]+) raw samples\)",
                lambda n: rounded(n / 7500 / 2880, ".0f"),
            ),
            rx(DISK),
        ),
    ),
    *(
        Figure(
            "docs/sizing.md",
            quote,
            f"{SCALE}, {SCALE_THRESHOLDS}",
            of(*(elsewhere(path, finder) for path in (SCALE, SCALE_THRESHOLDS))),
        )
        for quote, finder in (
            ("| every group once, summed | {} CPU-s | {} CPU-s |", all_groups("CPU (blocks)")),
            ("| **per 30 s** | **{} CPU-s** | **{} CPU-s** |", all_groups("CPU per 30 s")),
            (
                "| of which the 30 s groups (etcd, balloons, CapacityBuffers, registries) | {} | {} |",
                lambda t: rule_cpu_per_30s(t)[:1],
            ),
            (
                "| of which the `nodeAlertInterval` (2 min) groups, per 30 s | {} | {} |",
                lambda t: rule_cpu_per_30s(t)[1:2],
            ),
            (
                "| of which the `slowInterval` (4 min) groups, per 30 s | {} | {} |",
                lambda t: rule_cpu_per_30s(t)[2:],
            ),
            (
                "| of which the HTTP API's own cost per query (`count(vector(1))`, 45 rules per "
                "30 s) | {} | {} |",
                rx(FLOOR, seconds(".2f")),
            ),
            (
                "| heaviest group | imagepull-views.rules {} s (every 4 min) | "
                "imagepull-views.rules {} s |",
                group_seconds("imagepull-views.rules", ".2f"),
            ),
            # Live, Prometheus' own evaluation (the reports' profiled paragraph).
            (
                "| rule evaluation: the queries, the records written, the alerts kept | {} | {} |",
                lambda t: profiled_per_30s(t)[:1],
            ),
            (
                "| ... of which the alerts' label and annotation templates | {} | {} |",
                lambda t: profiled_per_30s(t)[1:2],
            ),
            (
                "| + background GC, by the rules' share of the bytes allocated | {} ({}) | {} ({}) |",
                lambda t: profiled_per_30s(t)[2:],
            ),
            ("| **per 30 s** | **{} CPU-s** | **{} CPU-s** |", PROFILED_PER_30S),
        )
    ),
    Figure(
        "docs/sizing.md",
        "the realistic fleet, is **missed** either way ({} by hand, {} live)",
        SCALE,
        of(all_groups("CPU per 30 s"), PROFILED_PER_30S),
    ),
    Figure(
        "docs/sizing.md",
        "**On the realistic fleet that is under the budget: {} CPU-s per 30 s** (the two cycles "
        "{} and {}), against {} by hand",
        SCALE,
        of(
            PROFILED_PER_30S,
            rx(r"\(the cycles one by one: ([\d.]+), ([\d.]+)\)"),
            all_groups("CPU per 30 s"),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "hold live: {} CPU-s per 30 s**, most of it in the two per-node alert groups "
        "(`evaluationTime` {} s for the neighbor alerts and {} s for the image-pull alerts",
        SCALE_THRESHOLDS,
        of(PROFILED_PER_30S, live_seconds("neighbor"), live_seconds("imagepull")),
    ),
    Figure(
        "docs/sizing.md",
        "the two per-node alert groups took {} and {} s an evaluation, over the 1 s per group "
        "the mixin aims at, and the head held {} series more than before the fleet (the firing "
        "alerts' `ALERTS` and `ALERTS_FOR_STATE` among them) for {} MiB of RSS",
        SCALE_THRESHOLDS,
        of(
            live_seconds("neighbor"),
            live_seconds("imagepull"),
            cell("head series", "added"),
            cell(LIVE_RSS, "added"),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "of the {} CPU-s of rule evaluation the profile puts {} on template expansion",
        SCALE_THRESHOLDS,
        PROFILED_TEMPLATES,
    ),
    Figure(
        "docs/sizing.md", "About {} of each figure is the bench's own cost", SCALE, floor_per_30s
    ),
    Figure(
        "docs/sizing.md",
        "(exporter-slow {} and {} ms)",
        f"{SCALE}, {SCALE_THRESHOLDS}",
        of(
            *(
                elsewhere(path, cell("kube-scale-exporter-exporter-slow", "CPU (blocks)"))
                for path in (SCALE, SCALE_THRESHOLDS)
            )
        ),
    ),
    Figure(
        "docs/sizing.md", "a query that reads nothing costs {} ms of CPU", SCALE, query_floor_ms
    ),
    Figure(
        "docs/sizing.md",
        "so `node:kubescale_kubelet_serialize_image_pulls:nonzero` holds {} series there",
        SCALE,
        cell(
            "record",
            "series N=7500",
            where=("query", "node:kubescale_kubelet_serialize_image_pulls:nonzero"),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "would save about half of the 2 minute groups' {} and",
        SCALE,
        lambda t: rule_cpu_per_30s(t)[1:2],
    ),
    Figure(
        "docs/sizing.md",
        "With every node at the thresholds the rules cost {} more per 30 s, {}:",
        SCALE,
        thresholds_more,
    ),
    Figure(
        "docs/sizing.md",
        "(the neighbor alerts {} s an evaluation against {}, the image-pull alerts {} against {})",
        f"{SCALE_THRESHOLDS}, {SCALE}",
        of(
            *(
                elsewhere(path, group_seconds(group, spec))
                for group in ("neighbor", "imagepull")
                for path, spec in ((SCALE_THRESHOLDS, ".2f"), (SCALE, ".3f"))
            )
        ),
    ),
    Figure(
        "docs/sizing.md",
        "nodes), {} s here.",
        SCALE,
        total("CPU (blocks)", lambda ms: ms / 1000, "120 s"),
    ),
    Figure(
        "docs/sizing.md",
        "about 355,000 series, {} s an evaluation here",
        SCALE,
        total("CPU (blocks)", lambda ms: ms / 1000, "240 s"),
    ),
    Figure(
        "docs/sizing.md",
        "(+{} per 30 s here). - **Everything else",
        SCALE,
        lambda t: rule_cpu_per_30s(t)[1:2],
    ),
    Figure(
        "docs/sizing.md",
        "doubles these groups' cost (+{} per 30 s here). `mixin/config.libsonnet`",
        SCALE,
        lambda t: rule_cpu_per_30s(t)[2:],
    ),
    Figure(
        "docs/sizing.md",
        "`evaluationTime` was at most {} s for a group ({})",
        SCALE,
        slowest_live_group,
    ),
    Figure(
        "docs/sizing.md",
        "Prometheus used {} cores on average over the 5 minutes",
        SCALE,
        rx(r"Prometheus used ([\d.]+) cores on average"),
    ),
    Figure(
        "docs/sizing.md",
        "node is 7,500 head series, ~{} MiB of RSS at the measured cost per series below",
        SCALE,
        lambda t: rx(PER_SERIES, lambda b: rounded(b * 7500 / 2**20, ".0f"))(t)[:1],
    ),
    Figure(
        "docs/sizing.md",
        "| 7,500 nodes and the cluster Deployment, head series added (live, measured: {} per node "
        "and what the rules record) | {} |",
        SCALE,
        of(
            cell("node, as synthesized*", "with Prometheus' per-target series*"),
            cell("head series", "added"),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "panel touches {} samples (the budget is 5,000,000, a tenth of `--query.max-samples`), "
        'and no panel returns more than {} series except the topk-capped "worst nodes" tables '
        "(at most {} rows)",
        SCALE,
        heaviest_panel,
    ),
    Figure("docs/sizing.md", "(at most {} samples over 6 h)", SCALE, node_panel_samples),
    # docs/sizing.md: on each node
    Figure(
        "docs/sizing.md",
        "| the interpreter alone (in the venv) | {} MiB |",
        NODE_MEMORY,
        cell("the interpreter alone*", "RSS after 1 scrape MiB"),
    ),
    *(
        Figure(
            "docs/sizing.md",
            f"| {label} | {{}} MiB | {{}} ms |",
            NODE_MEMORY,
            of(cell(row, RSS_LAST), cell(row, "CPU ms / scrape", ".1f")),
        )
        for label, row in (
            ("`neighbor`", "neighbor"),
            ("`neighbor`, `neighbor_gc`", "neighbor, neighbor_gc"),
            (
                "+ `imagepull` (its ingest source, as deploy/ runs it), without its pod watch",
                NO_WATCH_ROW,
            ),
            ("+ the pod watch of 110 pods: the default node pod, in the venv", VENV_ROW),
        )
    ),
    Figure(
        "docs/sizing.md",
        "| node_exporter {}, default collectors ({} samples here) | {} MiB | {} ms |",
        NODE_MEMORY,
        of(
            peer("node_exporter", release=True),
            cell("node_exporter*", "samples", ",.0f"),
            cell("node_exporter*", RSS_LAST),
            cell("node_exporter*", "CPU ms / scrape", ".1f"),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "What the node pod itself costs, beside node_exporter {} with its default collectors",
        NODE_MEMORY,
        peer("node_exporter", release=True),
    ),
    Figure(
        "docs/sizing.md",
        "| **the default node pod in its image, with `--web.kube-rbac`** | **{} MiB** (target "
        "{}: {}) | {} ms |",
        NODE_MEMORY,
        of(cell(IMAGE_ROW, RSS_LAST), node_target, cell(IMAGE_ROW, "CPU ms / scrape", ".1f")),
    ),
    Figure(
        "docs/sizing.md",
        "CPU per scrape here ran at load {}; scrape_cost, at load {}, measured {} ms for the "
        "default pod against node_exporter's {}.",
        NODE_MEMORY,
        of(
            load_span(".1f"),
            elsewhere(SCRAPE_COST, load_span()),
            elsewhere(SCRAPE_COST, cell(OURS_SCRAPE, "CPU ms / scrape", ".1f")),
            elsewhere(SCRAPE_COST, cell("node_exporter*", "CPU ms / scrape", ".1f")),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "each MiB per pod is {} GiB of the fleet",
        NODE_MEMORY,
        rx(r"each MiB per pod is ([\d.]+) GiB of the fleet"),
    ),
    Figure(
        "docs/sizing.md",
        "{} MiB against {} for ours, and {} MiB less at `import kube_scale_exporter.cli`",
        EXPOSITION,
        of(
            cell("RSS of importing the families*", "prometheus_client"),
            cell("RSS of importing the families*", "ours"),
            cell("RSS of import kube_scale_exporter.cli, MiB", "prometheus_client - ours", ".1f"),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "Most of the {} MiB charged to it above",
        EXPOSITION,
        cell(
            "RSS of import kube_scale_exporter.cli,kube_scale_exporter.web.routes, MiB",
            "prometheus_client",
        ),
    ),
    Figure(
        "docs/sizing.md",
        "over the default node pod's imports the saving is {} MiB",
        EXPOSITION,
        cell("RSS of the default node pod's imports*", "prometheus_client - ours", ".1f"),
    ),
    Figure(
        "docs/sizing.md",
        "Encoding takes {}-{}x less CPU in the text format and {}-{}x less in OpenMetrics, on "
        "the golden families ({} ms against {} ms for their 210 samples as text) and on a "
        "scrape 40 times their size, in {} lines.",
        EXPOSITION,
        of(
            lambda t: encode_ratios(t, ("text*", "openmetrics*")),
            cell("CPU to encode 210 samples (golden, text*", "ours", seconds(".2f")),
            cell("CPU to encode 210 samples (golden, text*", "prometheus_client", seconds(".2f")),
            rx(r"Ours is (\d+) lines of code"),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "The API server's own floor, the same watch opened bare on a connection of its own (no "
        "list, no informer), is {} KiB: ours is {}x it",
        RESULTS + "node_watches.md",
        lambda t: (
            *cell("the API server's floor: a bare watch*", "value")(t.split("\n## ", 1)[0]),
            *cell("ours / the floor", "value")(t.split("\n## ", 1)[0]),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "all 7,500 relisted within {} s of the restart, every list from the new watch cache's "
        "spec.nodeName index and none from etcd. On a real cluster the time is shorter: here the "
        "7,500 exporters shared the API server's two cores, and from the restart to the last "
        "relist they used {} CPU-s of TLS handshakes and lists to the API server's {} (its own "
        "start included), last in line for the CPU. Where each exporter has its node's CPU, the "
        "relists wait for their random 0-10 s jitter, their backoff after the reconnects that "
        "failed while the server was down, and the API server's own {} CPU-s",
        RESULTS + "node_watches.md",
        api_restart,
    ),
    Figure(
        "README.md",
        "| node mode's pod watches at 7,500 nodes, the API server's cost per watch | {} KiB of heap "
        "and stacks, {}x the {} KiB of the same watch opened bare; {} MiB for the fleet; after an "
        "API server restart all 7,500 relisted from its watch cache within {} s, none from etcd",
        RESULTS + "node_watches.md",
        lambda t: (
            *cell("API server heap + stacks per watch, KiB", "value")(t.split("\n## ", 1)[0]),
            *cell("ours / the floor", "value")(t.split("\n## ", 1)[0]),
            *cell("the API server's floor: a bare watch*", "value")(t.split("\n## ", 1)[0]),
            apiserver_watch_cost(t)[3],
            api_restart(t)[0],
        ),
    ),
    Figure(
        "docs/sizing.md",
        "all 7,500 were watching again {} s after all closed at once",
        RESULTS + "node_watches.md",
        lambda t: cell("... all relisted and watching again, s", "value")(t.split("\n## ", 1)[0]),
    ),
    Figure(
        "docs/sizing.md",
        "the API server spends {} KiB of heap and goroutine stacks ({} goroutines) and {} KiB "
        "of RSS per watch: {} MiB of heap and {} MiB of RSS for the fleet, and {} cores at rest",
        RESULTS + "node_watches.md",
        apiserver_watch_cost,
    ),
    # docs/sizing.md: the cluster Deployment
    Figure(
        "docs/sizing.md",
        "| CPU per scrape (20 sequential scrapes) | {} ms | {} ms ({}x) | {} ms | {} ms ({}x) |",
        CLUSTER,
        of(
            DEPLOY_VS_KSM,
            cell("CPU ms per scrape", EVERY_POD, ".1f"),
            cell("CPU ms per scrape", KSM_PODS, ",.0f"),
            rx(r"ksm \(pods,nodes\) / exporter \(every pod\) ([\d.]+)x", ".2f"),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "| samples per scrape | {} | {} | {} | {} |",
        CLUSTER,
        of(*(cell("samples", c) for c in (DEPLOY, KSM, EVERY_POD, KSM_PODS))),
    ),
    Figure(
        "docs/sizing.md",
        "| at rest: CPU s per minute | {} | {} ({}x) | {} | {} ({}x) |",
        CLUSTER,
        of(
            cell("at rest: CPU s per minute", DEPLOY),
            cell("at rest: CPU s per minute", KSM),
            cell("rest, all four: cpu_s_per_min", f"{KSM} / {DEPLOY}", ".1f"),
            cell("at rest: CPU s per minute", EVERY_POD),
            cell("at rest: CPU s per minute", KSM_PODS),
            cell("rest, all four: cpu_s_per_min", f"{KSM_PODS} / {EVERY_POD}", ".1f"),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "| at rest: RSS | {} MiB | {} MiB ({}x) | {} MiB | {} MiB ({}x) |",
        CLUSTER,
        of(
            cell(AT_REST_RSS, DEPLOY, ".1f"),
            cell(AT_REST_RSS, KSM, ",.0f"),
            cell("rest, all four: rss_mib", f"{KSM} / {DEPLOY}", ".1f"),
            cell(AT_REST_RSS, EVERY_POD, ".1f"),
            cell(AT_REST_RSS, KSM_PODS, ",.0f"),
            cell("rest, all four: rss_mib", f"{KSM_PODS} / {EVERY_POD}", ".1f"),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "| peak RSS over the run | {} MiB | {} MiB | {} MiB | {} MiB |",
        CLUSTER,
        of(
            cell("peak RSS over the run, MiB", DEPLOY),
            cell("peak RSS over the run, MiB", KSM, ",.0f"),
            cell("peak RSS over the run, MiB", EVERY_POD),
            cell("peak RSS over the run, MiB", KSM_PODS, ",.0f"),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "| first complete scrape after start | {} s | {} s | {} s | {} s |",
        CLUSTER,
        of(
            *(
                cell("first complete scrape after start, s", c)
                for c in (DEPLOY, KSM, EVERY_POD, KSM_PODS)
            )
        ),
    ),
    Figure(
        "docs/sizing.md",
        "The cluster-mode Deployment on the kwok fleet of {} nodes ({} of them GPU nodes) and "
        "{} pods of [bench/results/fleet.md](../bench/results/fleet.md), beside "
        "kube-state-metrics v{} on the same cluster, in one run (`python -m bench.fleet "
        "--cluster-scale`, [bench/results/cluster_scale.md](../bench/results/cluster_scale.md): "
        "the Kubernetes {} API server on etcd {},",
        CLUSTER,
        of(
            rx(r"# Cluster mode at (\d+) nodes", ",.0f"),
            rx(r"\d+ Nodes \((\d+) GPU\)"),
            rx(r"# Cluster mode at \d+ nodes and (\d+) pods", ",.0f"),
            peer("kube-state-metrics", release=True),
            rx(r"Kubernetes v([\d.]+) on a main"),
            rx(r"on a main and an events etcd ([\d.]+),"),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "| a rollout of {} pods: CPU s per minute | {} | {} | {} | {} ({}x) |",
        CLUSTER_500,
        of(
            rx(r"\| (\d+)-pod rollout \([^)]*\): CPU s per minute", ",.0f"),
            *(
                cluster_phase(r"\d+-pod rollout \(\d+ s\)", c)
                for c in (DEPLOY, KSM, EVERY_POD, KSM_PODS)
            ),
            cell("rollout: cpu_s_per_min", f"{KSM_PODS} / {EVERY_POD}", ".1f"),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "| {} pull events a second for {} s: CPU s per minute | {} | {} | {} | {} |",
        CLUSTER_500,
        of(
            rx(r"image-pull events \((\d+)/s\): CPU"),
            rx(r"in (\d+)s \(\d+/s\), 0 errors"),
            *(
                cluster_phase(r"image-pull events \(\d+/s\)", c)
                for c in (DEPLOY, KSM, EVERY_POD, KSM_PODS)
            ),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "kube-state-metrics exports a series per object ({} times our samples here)",
        CLUSTER,
        ksm_samples_over_ours,
    ),
    Figure(
        "docs/sizing.md",
        "costs a scrape about {} µs per pod**: the balloon collector sums the pods it holds at each "
        "scrape ({} ms for {} pods, against {} ms with deploy/'s selector, which matches the "
        "balloons only: ({} - {}) ms / {}), and holds them: {} MiB against {}.",
        CLUSTER,
        balloon_cost,
    ),
    Figure(
        "docs/sizing.md",
        "the Deployment used {}% of a core and grew to {} MiB holding",
        CLUSTER_500,
        of(
            lambda t: (
                rounded(
                    num(cluster_phase(r"image-pull events \(\d+/s\)", DEPLOY)(t)[0]) / 60 * 100,
                    ".1f",
                ),
            ),
            cell("peak RSS over the run, MiB", DEPLOY),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "window by window the Deployment read {}-{} MiB of JSON a minute and used {}-{} CPU-s "
        "a minute for it",
        CLUSTER,
        deploy_rest_range,
    ),
    Figure(
        "docs/sizing.md",
        "the API server spent {} CPU-s on the Deployment, {} on the every-pod exporter's "
        "streaming list of {} pods, and {} and {} on kube-state-metrics",
        CLUSTER,
        of(
            cell(f"at rest, + {DEPLOY}", "its start: API server CPU s"),
            cell(f"at rest, + {EVERY_POD}", "its start: API server CPU s"),
            rx(r"matches \((\d+) pods;", ",.0f"),
            cell(f"at rest, + {KSM}", "its start: API server CPU s"),
            cell(f"at rest, + {KSM_PODS}", "its start: API server CPU s"),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "the API server's own CPU moved by up to {} CPU-s a minute between two 60 s windows",
        CLUSTER,
        apiserver_window_swing,
    ),
    Figure(
        "docs/sizing.md",
        "A relist after a 410 reads them again in {} s ({} CPU-s).",
        CLUSTER_500,
        of(cell("Pulled events", "wall s"), cell("Pulled events", "CPU s")),
    ),
    # docs/sizing.md: the cluster Deployment through a rollout and a 410
    Figure(
        "docs/capacitybuffer.md",
        "with 5,000 buffers (the cap: every one cached) the exporter's RSS was {} MiB; with "
        "100,000 ({} counted by key) {} MiB, the collector up (success {}) and counting all "
        "{}; the slowest of 5 scrapes took {} s and {} s. The 100,000 were counted {} s after "
        "the exporter started, most of it waiting for the API server, whose watch cache of "
        "the buffers was still filling ({} lists answered 429; the exporter's CPU to then: "
        "{} s)",
        FLOOD,
        of(
            cell("exporter RSS, MiB", "5,000"),
            cell(
                "kubescale_capacitybuffer_objects_not_cached{resource=capacitybuffers}", "100,000"
            ),
            cell("exporter RSS, MiB", "100,000"),
            cell("collector success", "100,000"),
            cell("kubescale_capacitybuffer_buffers", "100,000"),
            cell("slowest of 5 scrapes, s", "5,000"),
            cell("slowest of 5 scrapes, s", "100,000"),
            cell("counted after, s", "100,000"),
            cell("lists answered 429 meanwhile*", "100,000"),
            cell("exporter CPU to then, s", "100,000"),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "on a fleet of {} nodes and {} pods (`python -m bench.cluster_churn`",
        CHURN,
        rx(r"--nodes (\d+) --pods (\d+)", ",.0f", ",.0f"),
    ),
    Figure(
        "docs/sizing.md",
        "({} pods replaced in {} s): the Deployment used {} CPU-s and stayed at {} MiB; the "
        "every-pod exporter used {} CPU-s ({} per minute) and peaked at {} MiB. Neither "
        "relisted",
        CHURN,
        of(
            rx(r"template changed: ([\d,]+) pods replaced in (\d+) s"),
            cell("CPU s over the rollout", "deploy"),
            cell("RSS peak in the rollout, MiB", "deploy"),
            cell("CPU s over the rollout", "every pod"),
            cell("CPU s per minute", "every pod"),
            cell("RSS peak in the rollout, MiB", "every pod"),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "both stopped (SIGSTOP) for {} s while every pod was replaced again and {} image-pull "
        "events were sent",
        CHURN,
        rx(
            r"stopped \(SIGSTOP\) for (\d+) s: a second rollout of [\d,]+ pods \(\d+ s\) "
            r"and ([\d,]+) image-pull"
        ),
    ),
    Figure(
        "docs/sizing.md",
        "The Deployment's view was whole again {} s after the resume and peaked at {} MiB; the "
        "every-pod exporter's after {} s, peaking at {} MiB",
        CHURN,
        of(
            cell("view whole after the resume, s", "deploy"),
            cell("RSS peak from the resume, MiB", "deploy"),
            cell("view whole after the resume, s", "every pod"),
            cell("RSS peak from the resume, MiB", "every pod"),
        ),
    ),
    Figure(
        "docs/sizing.md",
        "all {} Pulled and {} Failed events sent while they were stopped were counted, and the "
        "{} new pods seen Running",
        CHURN,
        of(
            rx(r"\| Pulled sent / counted \| ([\d,]+) / \1 \| \1 / \1 \|"),
            rx(r"\| Failed sent / counted \| ([\d,]+) / \1 \| \1 / \1 \|"),
            rx(r"\| pods Running as it sees them \| 0 \| ([\d,]+) \|"),
        ),
    ),
    # docs/deploy.md
    Figure(
        "docs/deploy.md",
        "holds {} MiB RSS after 10,000 scrapes and takes {} ms of CPU a scrape; without the pod "
        "watch, {} MiB",
        NODE_MEMORY,
        of(
            cell(IMAGE_ROW, RSS_LAST),
            cell(IMAGE_ROW, "CPU ms / scrape"),
            cell(NO_WATCH_ROW, RSS_LAST),
        ),
    ),
    Figure(
        "docs/deploy.md",
        "with 50 active ingests and 300 pods ends at {} MiB",
        RESULTS + "imagepull.md",
        rx(r"after the run \| [\d.]+ / [\d.]+ / ([\d.]+) MiB"),
    ),
    Figure(
        "docs/deploy.md",
        "dump of 100,000 entries peaks at {} MiB",
        NEIGHBOR,
        cell("kube-scale-exporter neighbor_gc*", "peak RSS MiB"),
    ),
    Figure(
        "docs/deploy.md",
        "a valid user's first scrape is answered in {} s, where node_exporter {} takes {} s behind "
        "16 and {} s behind 100",
        WEB_FLOOD,
        of(flood_first_scrape, peer("node_exporter", release=True), flood_peer),
    ),
    Figure(
        "docs/deploy.md",
        "beside node_exporter {} with the same file, results in `bench/results/web_security.md`; "
        "latencies on the shared 2-core machine are noisy, CPU time less so): with the selector "
        "server a keep-alive scrape costs the exporter {} ms of CPU over http, TLS and TLS with "
        "basic auth (node_exporter: {} ms in the same run, with its larger body); the first "
        "scrape with basic auth pays one bcrypt ({} ms at cost 10; node_exporter {} ms); a new "
        "TLS connection costs {} ms of CPU (node_exporter {} ms).",
        WEB_SECURITY,
        of(peer("node_exporter", release=True), security_cpu, security_tls),
    ),
    Figure(
        "docs/deploy.md",
        "relisting 2,000 pods peaks at {} MiB",
        KUBE_LIST,
        cell("peak RSS, MiB", "kube-scale-exporter"),
    ),
    Figure(
        "docs/deploy.md",
        "Deployment watching {} nodes and {} pods holds {} MiB at rest and peaked at {} MiB "
        "under {} pull events a second",
        CLUSTER_500,
        of(
            rx(r"# Cluster mode at (\d+) nodes and (\d+) pods", None, ",.0f"),
            cell(AT_REST_RSS, DEPLOY, ".1f"),
            cell("peak RSS over the run, MiB", DEPLOY),
            rx(r"image-pull events \((\d+)/s\): CPU"),
        ),
    ),
    Figure(
        "docs/deploy.md",
        "| RSS of the node pod (exporter + proxy) | {} MiB | {} MiB | | CPU per scrape, all the "
        "pod's processes | {} ms | {} ms | | scrape latency p50 / p99 | {} / {} ms | {} / {} ms |",
        KUBE_RBAC,
        of(
            cell(SIDECAR_RSS, "in process"),
            cell(SIDECAR_RSS, "sidecar"),
            cell(SIDECAR_CPU, "in process"),
            cell(SIDECAR_CPU, "sidecar"),
            cell("scrape latency p50, ms", "in process"),
            cell("scrape latency p99, ms", "in process"),
            cell("scrape latency p50, ms", "sidecar"),
            cell("scrape latency p99, ms", "sidecar"),
        ),
    ),
    Figure(
        "docs/deploy.md",
        "per hour per pod, default settings | {} | {} | | the same with "
        "`--web.kube-rbac.cache-ttl 5m` | {} | | | reviews during a flood of invalid tokens (8 "
        "clients, 10 s) | {} (the rest 429) | {} (the rest wait) |",
        KUBE_RBAC,
        of(
            cell(REVIEWS_1M, "per hour per pod"),
            cell("kube-rbac-proxy*", "per hour per pod"),
            cell(REVIEWS_5M, "per hour per pod"),
            cell("in process", "TokenReviews"),
            cell("kube-rbac-proxy", "TokenReviews"),
        ),
    ),
    Figure(
        "docs/deploy.md",
        "The sidecar costs every node pod {} MiB more ({} GiB over 7,500 nodes), {}x the CPU",
        KUBE_RBAC,
        of(
            cell(SIDECAR_RSS, "sidecar - in process", ".0f"),
            rx(r"at 7,500 nodes the difference is (\d+) GiB"),
            cell(SIDECAR_CPU, "sidecar / in process", ".1f"),
        ),
    ),
    Figure(
        "docs/deploy.md",
        "{} a second over 7,500 nodes against the sidecar's {}",
        KUBE_RBAC,
        of(
            cell(REVIEWS_1M, "per second at 7,500 nodes"),
            cell("kube-rbac-proxy*", "per second at 7,500 nodes"),
        ),
    ),
    Figure(
        "docs/deploy.md",
        "`--web.kube-rbac.cache-ttl 5m` ({} a second;",
        KUBE_RBAC,
        cell(REVIEWS_5M, "per second at 7,500 nodes"),
    ),
    # docs/reliability.md: under load
    Figure(
        "docs/reliability.md",
        "The same load then goes to node_exporter {} (",
        LOAD,
        peer("node_exporter", release=True),
    ),
    Figure(
        "docs/reliability.md",
        "| ours, 60 s | {} | {} | {} ms | {} ms | {} ms | {} MiB | {} MiB | {} MiB |",
        LOAD,
        of(
            cell("kube-scale-exporter", "scrapes", ",.0f"),
            cell("kube-scale-exporter", "failed"),
            cell("kube-scale-exporter", "p50 ms", ".1f"),
            cell("kube-scale-exporter", "p99 ms", ".0f"),
            cell("kube-scale-exporter", "CPU ms/scrape"),
            cell("kube-scale-exporter", "RSS start MiB"),
            cell("kube-scale-exporter", "RSS @10k MiB"),
            cell("kube-scale-exporter", "RSS end MiB"),
        ),
    ),
    Figure(
        "docs/reliability.md",
        "| node_exporter {} (arp), 60 s | {} | {} | {} ms | {} ms | {} ms | {} MiB | - | {} MiB |",
        LOAD,
        of(
            peer("node_exporter", release=True),
            *(
                cell("node_exporter (arp)", column, spec)
                for column, spec in (
                    ("scrapes", ",.0f"),
                    ("failed", "n"),
                    ("p50 ms", ",.0f"),
                    ("p99 ms", ",.0f"),
                    ("CPU ms/scrape", ".1f"),
                    ("RSS start MiB", "n"),
                    ("RSS end MiB", "n"),
                )
            ),
        ),
    ),
    Figure(
        "docs/reliability.md",
        "+{} MiB over the first 10,000 scrapes (allocator and thread stacks of the HTTP threads "
        "warming up), then flat to the end ({} more). - Latency is queueing: 20 scrapers share "
        "2 busy cores, {} scrapes/s; a single scrape on an idle exporter takes ~3 ms. CPU per "
        "scrape ({} ms) is the figure",
        LOAD,
        of(load_run, cell("kube-scale-exporter", "CPU ms/scrape")),
    ),
    Figure(
        "docs/reliability.md",
        "node_exporter {}'s arp collector reads the table over netlink (its 1.5 read "
        "`/proc/net/arp` and finished no scrape within 30 s here): under the same 20 scrapers it "
        "answered {} scrapes at {} s each, {} ms of CPU per scrape ({}x ours), and grew to {} MiB "
        "RSS.",
        LOAD,
        of(
            peer("node_exporter"),
            cell("node_exporter (arp)", "scrapes", ",.0f"),
            cell("node_exporter (arp)", "p50 ms", seconds(".1f")),
            cell("node_exporter (arp)", "CPU ms/scrape", ".1f"),
            arp_cpu_ratio,
            cell("node_exporter (arp)", "RSS end MiB", ".0f"),
        ),
    ),
    # docs/reliability.md: idle and slow connections
    *(
        Figure(
            "docs/reliability.md",
            f"| {first} | {conn} | {{}}{note} | {{}} -> {{}} MiB | {{}} | {{}} | {{}} / {{}} ms | "
            "{} / {} ms | {} / {} ms |",
            WEB_IDLE,
            idle_row(server, conn),
        )
        for first, conn, note, server in (
            (
                "before: thread per connection",
                "http",
                " (backlog 5: the rest never reached it)",
                "before",
            ),
            ("before", "tls", " (connects still failing after 2 min)", "before"),
            ("asyncio (stdlib) prototype", "http", "", "asyncio prototype"),
            ("asyncio prototype", "tls", "", "asyncio prototype"),
            (
                "**chosen: selector loop + worker pool**, cap raised to 5,100",
                "http",
                "",
                "this tree, cap raised",
            ),
            ("chosen, cap raised", "tls", "", "this tree, cap raised"),
            (
                "**chosen, defaults** (`--web.max-connections 512`)",
                "http",
                "",
                "this tree",
            ),
            ("chosen, defaults", "tls", "", "this tree"),
        )
    ),
    *(
        Figure(
            "docs/reliability.md",
            f"| node_exporter {{}} | {conn} | {{}} | {{}} -> {{}} MiB | {{}} | {{}} | {{}} / {{}} ms "
            "| {} / {} ms | {} / {} ms |",
            WEB_IDLE,
            of(peer("node_exporter", release=True), idle_row("node_exporter", conn)),
        )
        for conn in ("http", "tls")
    ),
    Figure(
        "docs/reliability.md",
        "flood's handshakes ({} s in the table): the default also keeps TLS churn to a few ms ({} "
        "ms at most). 512 TLS connections are +{} MiB;",
        WEB_IDLE,
        lambda t: (
            seconds(".1f")(
                Decimal(idle_row("this tree, cap raised", "tls")(t)[-1].replace(",", ""))
            ),
            idle_row("this tree", "tls")(t)[-1],
            rounded(
                Decimal(idle_row("this tree", "tls")(t)[2])
                - Decimal(idle_row("this tree", "tls")(t)[1]),
                ".1f",
            ),
        ),
    ),
    # docs/neighbor.md
    Figure(
        "docs/neighbor.md",
        "beside node_exporter {} (its arp collector reads netlink)",
        NEIGHBOR,
        peer("node_exporter", release=True),
    ),
    Figure(
        "docs/neighbor.md",
        "machine (load {}), Debian's Python 3.11:",
        NEIGHBOR,
        load_span(),
    ),
    Figure(
        "docs/neighbor.md",
        "| the dump, 100,000 entries of one layout | {} ms ({} ms CPU) | {} ms ({} ms CPU) | {}x "
        "({}x CPU) |",
        NEIGHBOR,
        neighbor_dump("dump, one layout"),
    ),
    Figure(
        "docs/neighbor.md",
        "| the dump, 110,000 entries, one in eleven of another layout | {} ms ({} ms CPU) | {} ms "
        "({} ms CPU) | {}x ({}x CPU) |",
        NEIGHBOR,
        neighbor_dump("dump, mixed layouts"),
    ),
    Figure(
        "docs/neighbor.md",
        "| the table (`neighbor`'s O(1) read) | {} ms | {} ms | {}x |",
        NEIGHBOR,
        rx(r"\| table \(O\(1\)\) \| ([\d.]+) / [\d.]+ \| ([\d.]+) / [\d.]+ \| ([\d.]+)x"),
    ),
    *(
        Figure(
            "docs/neighbor.md",
            f"| {first} | {{}} ms | {{}} ms | {{}} MiB |",
            NEIGHBOR,
            of(
                *((peer("node_exporter", release=True),) if "{}" in first else ()),
                cell(row, "collector median ms", spec),
                cell(row, "process CPU ms / scrape", "n" if spec == ".2f" else ".0f"),
                cell(row, "RSS MiB"),
            ),
        )
        for first, row, spec in (
            ("`neighbor`", "kube-scale-exporter neighbor (*", ".2f"),
            ("`neighbor_gc` (with `neighbor`)", "kube-scale-exporter neighbor_gc*", ".0f"),
            ("node_exporter {} `--collector.arp`", "node_exporter*", ".0f"),
        )
    ),
    Figure(
        "docs/neighbor.md",
        "~{} ms of CPU over the floor at 100,000 entries). Messages outside runs go through a "
        "loop one at a time, ~{} us each over the floor",
        NEIGHBOR,
        neighbor_over_floor,
    ),
    Figure(
        "docs/neighbor.md",
        "node_exporter {}'s arp collector, which counts only the IPv4 entries of its own "
        "namespace, took {}x as long as `neighbor_gc` and {}x its CPU.",
        NEIGHBOR,
        of(
            peer("node_exporter"),
            rx(r"node_exporter's arp collector / ours: ([\d.]+)x \(`neighbor_gc`\)"),
            rx(r"process CPU per scrape, node_exporter / `neighbor_gc`: ([\d.]+)x"),
        ),
    ),
    # docs/mixin.md
    Figure(
        "docs/mixin.md",
        "{} CPU-seconds per 30 s on Prometheus 3.16 at 7,500 nodes, {} with every node at the "
        "alerts' thresholds",
        f"{SCALE}, {SCALE_THRESHOLDS}",
        of(*(elsewhere(path, all_groups("CPU per 30 s")) for path in (SCALE, SCALE_THRESHOLDS))),
    ),
    Figure(
        "docs/mixin.md",
        "{}x as many per evaluation as the same rules reading the last sample, for {}x the CPU",
        RESULTS + "mixin_gaps.md",
        rx(
            r"\*\*all groups\*\* \| \| \| [\d,]+ \| [\d,]+ \| ([\d.]+)x \| \d+ ms \| \d+ ms \| "
            r"([\d.]+)x",
            ".1f",
        ),
    ),
    # docs/scaling.md
    Figure(
        "docs/scaling.md",
        "| head series (7,500 node targets and the cluster target, every 30 s) | {} | | RSS | {} "
        "MiB ({} bytes per head series) | | Go heap in use | {} MiB |",
        SCALE,
        of(
            cell("head series", "added"),
            cell(LIVE_RSS, "added"),
            lambda t: rx(PER_SERIES)(t)[:1],
            cell(LIVE_HEAP, "added"),
        ),
    ),
    Figure(
        "docs/scaling.md",
        "| at most {} ms ({}); {} missed iterations |",
        SCALE,
        of(
            lambda t: slowest_live_group(t, lambda ms: rounded(ms, ",.0f")),
            rx(r"; (\d+) missed iterations"),
        ),
    ),
    Figure(
        "docs/scaling.md",
        "heaviest group (imagepull-views.rules, every 4 min, on the backfilled blocks) | {} ms ({} "
        "ms with every node at the thresholds) | | rules and alerts, CPU per 30 s | {} s ({} s with "
        "every node at the thresholds) |",
        f"{SCALE}, {SCALE_THRESHOLDS}",
        of(
            *(
                elsewhere(path, cell("kube-scale-exporter-imagepull-views.rules", "CPU (blocks)"))
                for path in (SCALE, SCALE_THRESHOLDS)
            ),
            *(elsewhere(path, all_groups("CPU per 30 s")) for path in (SCALE, SCALE_THRESHOLDS)),
        ),
    ),
    Figure("docs/scaling.md", "| disk, a day at 7,500 nodes | about {} GiB |", SCALE, rx(DISK)),
    Figure(
        "docs/scaling.md",
        "at the measured ~{} KB of RSS per head series",
        SCALE,
        lambda t: rx(PER_SERIES, seconds(".1f"))(t)[:1],
    ),
]


def _what_the_doc_has(quote: str, doc: str) -> str:
    """The doc's words around the quote, with whatever figures stand there."""
    words = [re.escape(squeeze(w)) for w in quote.split("{}")]
    found = re.search(r"(.{0,40}?)".join(words).replace(r"\ ", r"\s*"), doc)
    return found.group() if found else "none of its words there: the passage moved or was rewritten"


@pytest.mark.parametrize("figure", FIGURES, ids=str)
def test_the_doc_quotes_what_its_results_file_holds(figure):
    source = figure.source.split(",")[0]
    values = figure.find((ROOT / source).read_text())
    assert figure.quote.count("{}") == len(values), (figure.quote, values)
    want = squeeze(figure.quote.format(*values))
    doc = squeeze((ROOT / figure.doc).read_text())
    assert want in doc, (
        f"{figure.doc} should say {want!r} ({figure.source} holds {values}); "
        f"it says {_what_the_doc_has(figure.quote, doc)!r}"
    )


def test_every_results_file_a_figure_names_exists():
    for figure in FIGURES:
        for source in figure.source.split(", "):
            assert (ROOT / source).is_file(), f"{figure}: no {source}"


def test_the_series_counts_readme_and_sizing_quote_are_the_bench_template_s():
    node = len(template.load("node")) - template.opt_in_count("node")
    preload = template.opt_in_count("node")
    cluster = template.load("cluster")
    owners = Counter(template.owner(s.family) for s in cluster.series)
    buffers = owners["capacitybuffer"]
    per_member = sum(dict(s.labels).get("member") == "etcd-main-0" for s in cluster.series)
    # What the golden file's buffers leave of the capacitybuffer entry: more buffers, up to
    # --capacitybuffer.max-buffers, add at most that.
    more_buffers = COLLECTOR_SERIES["capacitybuffer"]["cluster"] - buffers
    readme = squeeze((ROOT / "README.md").read_text())
    for want in (
        f"| series per node, default node collectors | {node} (+{preload} with "
        f"`--image-pull.preload`) | {NODE_SERIES} |",
        f"`--capacitybuffer.max-buffers` add at most {more_buffers}, failed pulls by registry "
        f"add at most 88) | {len(cluster)} | {CLUSTER_SERIES} |",
    ):
        assert want in readme, f"README.md should say {want!r}"
    sizing = squeeze((ROOT / "docs" / "sizing.md").read_text())
    want = (
        f"| {len(cluster)} (etcd {owners['etcd']}: {per_member} per member, of which 16 "
        f"performance series from its "
        f"/metrics; capacitybuffer {buffers}:"
    )
    assert want in sizing, f"docs/sizing.md should say {want!r}"
    assert f"and {more_buffers} more for buffers up to" in sizing
    assert f"| {CLUSTER_SERIES} |" in sizing


def test_every_alert_the_docs_name_is_in_rules():
    alerts = {
        name
        for path in (ROOT / "rules").glob("*.yaml")
        for name in re.findall(r"^\s*- alert: (\w+)", path.read_text(), re.M)
    }
    named = {
        (path.relative_to(ROOT).as_posix(), name)
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for name in re.findall(r"\bKubeScale[A-Z]\w*", path.read_text())
    }
    assert alerts, "no alert in rules/"
    assert sorted((doc, name) for doc, name in named if name not in alerts) == []
