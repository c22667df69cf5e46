"""What one node's (and the one cluster Deployment's) scrape holds: the series template.

The template is taken from the collectors' golden expositions (tests/golden/NAME.prom, one
for every registered collector of the mode), the exporter's own (tests/golden/exporter.prom)
and, for what no golden file can say (the watches each mode runs, production's etcd
resource prefixes), bench/scale/builtin/{node,cluster}.prom.

Node mode is what the DaemonSet serves with default collectors; cluster mode is the
Deployment with every cluster collector on, at the etcd topology of a 7,500-node cluster
(main etcd of 5 members, events etcd of 3, ~60 resource prefixes): a golden file made with
one test member is widened to that topology, since the budget is about production.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from kube_scale_exporter.collectors import COLLECTORS

REPO = Path(__file__).resolve().parents[2]
GOLDEN_DIR = REPO / "tests" / "golden"
BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"

# Families the synthetic fleet carries (it is configured as a GPU fleet would be) but the
# default collectors do not export; the series budget is for the defaults.
OPT_IN_FAMILIES = frozenset({"kubescale_image_preload_missing"})  # only with --image-pull.preload
# Owners with a golden file that are not collectors: the informer health series
# (kubescale_kube_*, with every scrape for the process's watches) and the exporter's own.
KUBE, EXPORTER = "kube", "exporter"
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
    # owner (collector, kube, exporter) -> "golden:PATH", "builtin" or the module that makes it
    sources: dict[str, str] = field(default_factory=dict)

    def __len__(self):
        return len(self.series)


@functools.cache
def _owners() -> dict[str, str]:
    """Family -> the collector (or kube, exporter) whose golden exposition holds it."""
    out: dict[str, str] = {}
    for name in [c.name for c in COLLECTORS] + [KUBE, EXPORTER]:
        for s in parse(golden_file(name).read_text()):
            if out.setdefault(s.family, name) != name:
                raise ValueError(f"{s.family} is in the golden files of {out[s.family]} and {name}")
    return out


def owner(family: str) -> str:
    return _owners().get(family, "unknown")


def parse(text: str) -> list[Series]:
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue  # the exporter serves none (kube_scale_exporter/metrics.py)
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


def golden_file(name: str) -> Path:
    path = GOLDEN_DIR / f"{name}.prom"
    if not path.exists():
        raise FileNotFoundError(f"{path.relative_to(REPO)} missing: every collector has one")
    return path


def _own_series(collectors: tuple[str, ...]) -> list[Series]:
    """build_info plus success and duration per enabled collector, as kube_scale_exporter/scrape.py emits."""
    own = parse(golden_file(EXPORTER).read_text())
    out = [s for s in own if s.family == "kubescale_build_info"]
    for fam, value in (
        ("kubescale_scrape_collector_success", 1.0),
        ("kubescale_scrape_collector_duration_seconds", 0.002),
    ):
        help_ = next(s.help for s in own if s.family == fam)
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
    """The template of one mode: its collectors' golden files, the watches' health and the
    exporter's own series."""
    builtin = parse((BUILTIN_DIR / f"{mode}.prom").read_text())
    collectors = registry_collectors(mode)
    template = Template(mode, [])
    for collector in collectors:
        path = golden_file(collector)
        template.series += parse(path.read_text())
        template.sources[collector] = f"golden:{path.relative_to(REPO)}"
    template.series += [s for s in builtin if owner(s.family) == KUBE]
    template.sources[KUBE] = "builtin"
    template.series = _own_series(collectors) + template.series
    template.sources[EXPORTER] = "kube_scale_exporter/scrape.py (build_info, success, duration)"
    if mode == "cluster":
        template.series = _widen_etcd(template.series, builtin)
    return template
