"""What one node's (and the one cluster Deployment's) scrape holds: the series template.

The template is taken from the collectors' golden expositions (tests/golden/NAME.prom)
where they exist, and from bench/scale/builtin/{node,cluster}.prom (written from the metric
names issues 2-5 fix) for every collector that has no golden file yet, so a run always
covers every default collector and says which source each part came from.

Node mode is what the DaemonSet serves with default collectors; cluster mode is the
Deployment with every cluster collector on, at the etcd topology of a 7,500-node cluster
(main etcd of 5 members, events etcd of 3, ~60 resource prefixes): a golden file made with
one test member is widened to that topology, since the budget is about production.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from kube_scale_exporter.collectors import COLLECTORS

REPO = Path(__file__).resolve().parents[2]
GOLDEN_DIR = REPO / "tests" / "golden"
BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"

# Which collector exports a family, for the families a builtin file holds (first match).
# The informer health series (kubescale_kube_*) come with every scrape for the process's
# watches (node: imagepull's pods; cluster: balloon's pods, priorityclasses, nodes); their
# golden file (tests/golden/kube.prom) shows other resources, so they always come from
# the builtin files, which list each mode's watches.
# Families the synthetic fleet carries (it is configured as a GPU fleet would be) but the
# default collectors do not export; the series budget is for the defaults.
OPT_IN_FAMILIES = frozenset({"kubescale_image_preload_missing"})  # only with --image-pull.preload

OWNER_PREFIXES = (
    ("kubescale_neighbor_gc_eligible_", "neighbor_gc"),
    ("kubescale_neighbor_", "neighbor"),
    ("kubescale_image_pull_duration_", "imagepull_events"),
    ("kubescale_image_pull_queue_wait_", "imagepull_events"),
    ("kubescale_image_pull_failures", "imagepull_events"),
    ("kubescale_image_pulls_succeeded", "imagepull_events"),
    ("kubescale_image_pull_failing_nodes", "imagepull_events"),
    ("kubescale_containerd_", "imagepull"),
    ("kubescale_image_", "imagepull"),
    ("kubescale_kubelet_", "imagepull"),
    ("kubescale_etcd_", "etcd"),
    ("kubescale_balloon_", "balloon"),
    ("kubescale_kube_", "kube"),
    ("kubescale_build_info", "exporter"),
    ("kubescale_scrape_collector_", "exporter"),
)
# Collectors each mode runs when the registry has none (before the collectors landed).
ETCD_TOPOLOGY = {"main": 5, "events": 3}


@dataclass(frozen=True)
class Series:
    """One series of one scrape: the sample name, its labels, its kind and a typical value."""

    family: str
    kind: str  # gauge, counter, histogram, summary, info, unknown
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    help: str = ""


@dataclass
class Template:
    mode: str
    series: list[Series]
    sources: dict[str, str] = field(default_factory=dict)  # collector -> "golden:PATH" | "builtin"

    def __len__(self):
        return len(self.series)


def owner(family: str) -> str:
    for prefix, name in OWNER_PREFIXES:
        if family.startswith(prefix):
            return name
    return "unknown"


def parse(text: str) -> list[Series]:
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue  # prometheus_client's *_created series are off in the exporter
            out.append(
                Series(
                    fam.name,
                    fam.type,
                    s.name,
                    tuple(sorted(s.labels.items())),
                    s.value,
                    fam.documentation,
                )
            )
    return out


def registry_collectors(mode: str) -> tuple[str, ...]:
    """Default collectors of the mode (node), or every collector of the mode (cluster)."""
    found = {c.name: c for c in COLLECTORS}
    if mode == "node":
        return tuple(n for n, c in found.items() if mode in c.modes and c.default_enabled)
    return tuple(n for n, c in found.items() if mode in c.modes)


def golden_file(collector: str) -> Path | None:
    path = GOLDEN_DIR / f"{collector}.prom"
    return path if path.exists() else None


def _own_series(collectors: tuple[str, ...], builtin: list[Series]) -> list[Series]:
    """build_info plus success and duration per enabled collector, as kube_scale_exporter/scrape.py emits."""
    info = [s for s in builtin if s.family == "kubescale_build_info"]
    out = list(info)
    for fam, value in (
        ("kubescale_scrape_collector_success", 1.0),
        ("kubescale_scrape_collector_duration_seconds", 0.002),
    ):
        help_ = next((s.help for s in builtin if s.family == fam), "")
        out += [Series(fam, "gauge", fam, (("collector", c),), value, help_) for c in collectors]
    return out


def _widen_etcd(series: list[Series], builtin: list[Series]) -> list[Series]:
    """Production etcd topology from a test fixture's: each per-member family as the first
    golden member has it, for every member of ETCD_TOPOLOGY; each per-cluster family for
    both clusters; key counts for the builtin's ~60 resource prefixes in main and events
    in the events cluster (a fixture writes a handful of resources; production has this many)."""
    resources = sorted(
        {dict(s.labels)["resource"] for s in builtin if s.family == "kubescale_etcd_keys"}
    )
    first: dict[str, tuple] = {}
    shapes: dict[str, list[Series]] = {}
    out = []
    for s in series:
        labels = dict(s.labels)
        if not s.family.startswith("kubescale_etcd_") or "etcd_cluster" not in labels:
            out.append(s)
            continue
        owner_key = (labels["etcd_cluster"], labels.get("member"))
        if first.setdefault(s.family, owner_key) == owner_key:
            shapes.setdefault(s.family, []).append(s)

    def variant(s: Series, **labels) -> Series:
        return Series(
            s.family,
            s.kind,
            s.name,
            tuple(sorted({**dict(s.labels), **labels}.items())),
            s.value,
            s.help,
        )

    for family, shape in shapes.items():
        for cluster, members in ETCD_TOPOLOGY.items():
            if family == "kubescale_etcd_keys":
                wanted = resources if cluster == "main" else ["events"]
                out += [variant(shape[0], etcd_cluster=cluster, resource=r) for r in wanted]
            elif "member" in dict(shape[0].labels):
                out += [
                    variant(s, etcd_cluster=cluster, member=f"etcd-{cluster}-{i}")
                    for i in range(members)
                    for s in shape
                ]
            else:
                out += [variant(s, etcd_cluster=cluster) for s in shape]
    return out


def opt_in_count(mode: str) -> int:
    """Series of the template that the default collectors do not export."""
    return sum(s.family in OPT_IN_FAMILIES for s in load(mode).series)


def load(mode: str) -> Template:
    """The template of one mode, golden files first, builtin for the rest."""
    builtin = parse((BUILTIN_DIR / f"{mode}.prom").read_text())
    collectors = registry_collectors(mode)
    template = Template(mode, [])
    from_golden: set[str] = set()
    for collector in collectors:
        path = golden_file(collector)
        if path is None:
            continue
        series = [s for s in parse(path.read_text()) if owner(s.family) not in ("exporter",)]
        template.series += series
        template.sources[collector] = f"golden:{path.relative_to(REPO)}"
        from_golden |= {owner(s.family) for s in series}
    for collector in collectors:
        if collector not in template.sources:
            template.series += [s for s in builtin if owner(s.family) == collector]
            template.sources[collector] = "builtin"
    if "kube" not in from_golden:
        template.series += [s for s in builtin if owner(s.family) == "kube"]
        template.sources["kube"] = "builtin"
    template.series = _own_series(collectors, builtin) + template.series
    template.sources["exporter"] = "kube_scale_exporter/scrape.py (build_info, success, duration)"
    if mode == "cluster":
        template.series = _widen_etcd(template.series, builtin)
    return template
