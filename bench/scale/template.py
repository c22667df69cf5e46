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

import importlib
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
GOLDEN_DIR = REPO / "tests" / "golden"
BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"

# Which collector exports a family, for the families a builtin file holds. The kube watch
# health series come from the Kubernetes API layer that imagepull (node) and balloon
# (cluster) use.
OWNER_PREFIXES = (
    ("kubescale_neighbor_", "neighbor"),
    ("kubescale_image_", "imagepull"),
    ("kubescale_kubelet_", "imagepull"),
    ("kubescale_etcd_", "etcd"),
    ("kubescale_balloon_", "balloon"),
    ("kubescale_kube_watch_", "kube"),
    ("kubescale_build_info", "exporter"),
    ("kubescale_scrape_collector_", "exporter"),
)
# Collectors each mode runs when no registry says otherwise (issues 2-5).
DEFAULT_COLLECTORS = {"node": ("neighbor", "imagepull"), "cluster": ("etcd", "balloon", "imagepull")}

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
            out.append(Series(fam.name, fam.type, s.name, tuple(sorted(s.labels.items())), s.value, fam.documentation))
    return out


def registry_collectors(mode: str) -> tuple[str, ...] | None:
    """Default collectors of the mode from the exporter's registry, once collectors exist."""
    try:
        registry = importlib.import_module("exporter.registry")
        found = registry.registered()
    except Exception:  # noqa: BLE001  (an unimportable tree falls back to the issues' list)
        return None
    if not found:
        return None
    if mode == "node":
        return tuple(n for n, c in found.items() if mode in c.modes and c.default_enabled)
    return tuple(n for n, c in found.items() if mode in c.modes)


# A collector that runs in both modes with different series keeps its plain golden file
# for this mode; the other mode's series need a NAME_MODE.prom.
PLAIN_GOLDEN_MODE = {"imagepull": "node"}


def golden_file(collector: str, mode: str) -> Path | None:
    stems = [f"{collector}_{mode}", f"{collector}-{mode}"]
    if PLAIN_GOLDEN_MODE.get(collector, mode) == mode:
        stems.append(collector)
    for stem in stems:
        path = GOLDEN_DIR / f"{stem}.prom"
        if path.exists():
            return path
    return None


def _own_series(collectors: tuple[str, ...], builtin: list[Series]) -> list[Series]:
    """build_info plus success and duration per enabled collector, as exporter/scrape.py emits."""
    info = [s for s in builtin if s.family == "kubescale_build_info"]
    out = list(info)
    for fam, value in (("kubescale_scrape_collector_success", 1.0),
                       ("kubescale_scrape_collector_duration_seconds", 0.002)):
        help_ = next((s.help for s in builtin if s.family == fam), "")
        out += [Series(fam, "gauge", fam, (("collector", c),), value, help_) for c in collectors]
    return out


def _widen_etcd(series: list[Series]) -> list[Series]:
    """Replicate per-member etcd series to ETCD_TOPOLOGY's members; keys to both clusters."""
    out, seen = [], set()
    for s in series:
        labels = dict(s.labels)
        if not s.family.startswith("kubescale_etcd_") or "etcd_cluster" not in labels:
            out.append(s)
            continue
        for cluster, members in ETCD_TOPOLOGY.items():
            if "member" in labels:
                variants = [{**labels, "etcd_cluster": cluster, "member": f"etcd-{cluster}-{i}"}
                            for i in range(members)]
            elif "resource" in labels:
                keep = cluster == "main" or labels["resource"] == "events"
                variants = [{**labels, "etcd_cluster": cluster}] if keep else []
            else:
                variants = [{**labels, "etcd_cluster": cluster}]
            for v in variants:
                key = (s.name, tuple(sorted(v.items())))
                if key not in seen:
                    seen.add(key)
                    out.append(Series(s.family, s.kind, s.name, key[1], s.value, s.help))
    return out


def load(mode: str) -> Template:
    """The template of one mode, golden files first, builtin for the rest."""
    builtin = parse((BUILTIN_DIR / f"{mode}.prom").read_text())
    collectors = registry_collectors(mode) or DEFAULT_COLLECTORS[mode]
    template = Template(mode, [])
    from_golden: set[str] = set()
    for collector in collectors:
        path = golden_file(collector, mode)
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
    template.sources["exporter"] = "exporter/scrape.py (build_info, success, duration)"
    if mode == "cluster":
        template.series = _widen_etcd(template.series)
    return template
