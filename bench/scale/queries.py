"""Every query the mixin makes Prometheus run: recording rules, alert expressions, and each
dashboard panel's targets at the dashboard's default range and the step Grafana would use.

Grafana's step model, as its Prometheus datasource computes it:
  interval   = round_interval(range / maxDataPoints), maxDataPoints = the panel's width in
               pixels (gridPos.w / 24 of a 1920 px wide dashboard) unless the panel sets it;
  step       = max(interval, the panel's min interval, the datasource scrape interval);
  $__interval = step; $__rate_interval = max(step + scrape, 4 * scrape);
  $__range   = the dashboard range; start and end aligned down to the step.
The datasource scrape interval is taken as the Prometheus scrape interval (30 s), which is
what the mixin's docs ask the datasource to be set to.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.scale.prom import SCRAPE_INTERVAL

REPO = Path(__file__).resolve().parents[2]
RULE_FILES = (REPO / "rules/prometheus_rules.yaml", REPO / "rules/prometheus_alerts.yaml")
DASHBOARD_DIR = REPO / "dashboards"
DASHBOARD_WIDTH_PX = 1920

# Grafana's interval rounding (rangeutil.roundInterval): below each bound, the step it picks.
_ROUND = [
    (15, 10),
    (35, 20),
    (75, 50),
    (150, 100),
    (350, 200),
    (750, 500),
    (1500, 1000),
    (3500, 2000),
    (7500, 5000),
    (12500, 10000),
    (17500, 15000),
    (25000, 20000),
    (45000, 30000),
    (90000, 60000),
    (210000, 120000),
    (450000, 300000),
    (750000, 600000),
    (1050000, 900000),
    (1500000, 1200000),
    (2700000, 1800000),
    (5400000, 3600000),
    (9000000, 7200000),
    (16200000, 10800000),
    (32400000, 21600000),
    (86400000, 43200000),
    (604800000, 86400000),
]

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


@dataclass(frozen=True)
class Query:
    kind: str  # record | alert | panel
    group: str  # rule group, or dashboard file
    name: str  # record or alert name, or "panel title [refId]"
    expr: str
    instant: bool = True
    range_s: int = 0
    step_s: int = 0
    capped: bool = False  # a per-node table or bar gauge bounded by topk


def duration_seconds(text: str) -> float:
    total = 0.0
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)", text):
        total += float(num) * _UNITS[unit]
    return total


def round_interval(seconds: float) -> int:
    ms = seconds * 1000
    for bound, value in _ROUND:
        if ms < bound:
            return max(1, int(value // 1000))
    return 604800


def load_rule_groups(files=RULE_FILES) -> list[dict]:
    groups = []
    for path in files:
        if Path(path).exists():
            groups += yaml.safe_load(Path(path).read_text()).get("groups", [])
    return groups


def rule_queries(groups: list[dict]) -> list[Query]:
    out = []
    for g in groups:
        for r in g["rules"]:
            kind = "record" if "record" in r else "alert"
            out.append(Query(kind, g["name"], r.get("record") or r["alert"], r["expr"].strip()))
    return out


def _panels(panels):
    for p in panels:
        yield p
        yield from _panels(p.get("panels", []))


def _capped(panel: dict, expr: str) -> bool:
    return panel.get("type") in ("table", "bargauge") and bool(
        re.search(r"topk\s*\(|:topk\d+", expr)
    )


def substitute(expr: str, variables: dict[str, str], step: int, range_s: int) -> str:
    rate = max(step + SCRAPE_INTERVAL, 4 * SCRAPE_INTERVAL)
    builtins = {
        "__rate_interval": f"{rate}s",
        "__interval": f"{step}s",
        "__interval_ms": str(step * 1000),
        "__range": f"{range_s}s",
        "__range_s": str(range_s),
        "__range_ms": str(range_s * 1000),
    }
    values = {**variables, **builtins}

    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3)
        return values.get(name, m.group(0))

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)", repl, expr)


def panel_step(panel: dict, range_s: int) -> int:
    width = max(1, round(panel.get("gridPos", {}).get("w", 24) / 24 * DASHBOARD_WIDTH_PX))
    points = panel.get("maxDataPoints") or width
    step = round_interval(range_s / points)
    floor = duration_seconds(panel["interval"]) if panel.get("interval") else 0
    return int(max(step, floor, SCRAPE_INTERVAL, -(-range_s // 11000)))


def dashboard_queries(path: Path, variables: dict[str, str]) -> list[Query]:
    """Each target of each panel, with variables already chosen (see choose_variables)."""
    dash = json.loads(Path(path).read_text())
    range_s = int(duration_seconds(dash.get("time", {}).get("from", "now-6h").replace("now-", "")))
    out = []
    for panel in _panels(dash.get("panels", [])):
        for target in panel.get("targets", []):
            if not target.get("expr") or target.get("hide"):
                continue
            step = panel_step(panel, range_s)
            instant = bool(target.get("instant")) and not target.get("range")
            expr = substitute(target["expr"], variables, step, range_s)
            name = f"{panel.get('title', '?')} [{target.get('refId', '?')}]"
            out.append(
                Query(
                    "panel",
                    Path(path).name,
                    name,
                    expr,
                    instant,
                    range_s,
                    step,
                    _capped(panel, expr),
                )
            )
    return out


def variable_defaults(path: Path) -> list[dict]:
    """The dashboard's query variables: name, the label_values() call, includeAll/multi."""
    dash = json.loads(Path(path).read_text())
    out = []
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.match(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*$", q or "")
        if not m:
            raise ValueError(f"{path.name}: variable {v.get('name')}: unsupported query {q!r}")
        out.append(
            {
                "name": v["name"],
                "match": m.group(1),
                "label": m.group(2),
                "all": bool(v.get("includeAll")),
                "all_value": v.get("allValue"),
            }
        )
    return out


def choose(var: dict, values: list[str]) -> str:
    """What Grafana substitutes on first load: All (every value as a regex) or the first."""
    if var["all"]:
        if var["all_value"]:
            return var["all_value"]
        return "(" + "|".join(re.escape(v) for v in values) + ")" if values else ".*"
    return values[0] if values else ""


def dashboards(directory: Path = DASHBOARD_DIR) -> list[Path]:
    return sorted(directory.glob("*.json"))


_RANGE = re.compile(r"\[(\d+[smhdwy](?:\d+[smhdwy])*)(?::[^\]]*)?\]")


def _longest(groups: list[dict], kind: str) -> tuple[int, str]:
    """The longest range vector a recording rule or alert reads, in seconds, and its rule."""
    found = [
        (int(duration_seconds(m)), r[kind])
        for g in groups
        for r in g["rules"]
        if kind in r
        for m in _RANGE.findall(r["expr"])
    ]
    return max(found, key=lambda f: f[0], default=(0, ""))


def longest_range(groups: list[dict], kind: str) -> int:
    """The longest range vector ([5m], [1h], ...) a recording rule or alert reads, in seconds."""
    return _longest(groups, kind)[0]


@dataclass(frozen=True)
class History:
    """What sets the history a segment needs so every query at its end sees full data: the
    longest dashboard range over recorded series whose rule reads the longest range vector,
    or the longest range an alert reads, whichever is longer, plus lookback for the rules
    and for the panels. One source for the segment's length (history_needed) and for what
    the report says sets it."""

    dashboard_range: int  # the longest default time range of a dashboard, seconds
    record_range: int  # the longest range vector a recording rule reads
    record: str  # that rule
    alert_range: int  # the longest range vector an alert reads
    alert: str  # that alert
    lookback: int  # Prometheus' lookback, counted once for the rules, once for the panels

    @property
    def seconds(self) -> int:
        return max(self.dashboard_range + self.record_range, self.alert_range) + 2 * self.lookback


def history(groups: list[dict], dashboard_paths: list[Path], lookback: int = 300) -> History:
    ranges = [
        int(
            duration_seconds(
                json.loads(Path(p).read_text())
                .get("time", {})
                .get("from", "now-6h")
                .replace("now-", "")
            )
        )
        for p in dashboard_paths
    ]
    record_range, record = _longest(groups, "record")
    alert_range, alert = _longest(groups, "alert")
    return History(max(ranges, default=0), record_range, record, alert_range, alert, lookback)


def history_needed(groups: list[dict], dashboard_paths: list[Path], lookback: int = 300) -> int:
    """History a segment needs, in seconds (see History)."""
    return history(groups, dashboard_paths, lookback).seconds


def rule_dependencies(groups: list[dict]) -> dict[str, int]:
    """Depth of each recording rule: 0 reads raw series only, k reads a rule of depth k-1."""
    records = {r["record"]: r["expr"] for g in groups for r in g["rules"] if "record" in r}
    depth: dict[str, int] = {}

    def visit(name, stack=()):
        if name in depth:
            return depth[name]
        if name in stack:
            raise ValueError(f"recording rules form a cycle through {name}")
        used = [
            o
            for o in records
            if o != name and re.search(rf"(?<![\w:]){re.escape(o)}(?![\w:])", records[name])
        ]
        depth[name] = 1 + max((visit(o, stack + (name,)) for o in used), default=-1)
        return depth[name]

    for name in records:
        visit(name)
    return depth
