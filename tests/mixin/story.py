"""Production cases as promtool input: a minute-by-minute story of scrape targets, turned
into the series Prometheus stores of them. A failed scrape (a timeout, the pod restarting)
writes `up 0`, `scrape_samples_scraped 0` and a stale marker on each of the target's series;
a series the target stops exposing gets a stale marker; a target service discovery drops
gets stale markers on all of its series, `up` included. tests/mixin/production.py tells the
stories.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tests.mixin.support import REPO

NODE_JOB = "kube-scale-exporter-node"
CLUSTER_JOB = "kube-scale-exporter-cluster"
RUNBOOK = "https://github.com/kube-scale-exporter/kube-scale-exporter/blob/main/docs/runbooks.md#"
RULE_FILES = ("prometheus_rules.yaml", "prometheus_alerts.yaml")
LABEL_ORDER = ("job", "instance", "node", "cluster")

Value = float | int | None
Values = Value | Callable[[int], Value]


def encode(points: list[Value]) -> str:
    """promtool's expanding notation for one series: runs of a constant step as `a+bxn`,
    absent samples as `_` (`_xn` for n of them), and a stale marker where a series that
    had a sample stops having one."""
    tokens: list[str] = []
    i, present = 0, False
    while i < len(points):
        if points[i] is None:
            j = i
            while j < len(points) and points[j] is None:
                j += 1
            missing = j - i - (1 if present else 0)
            if present:
                tokens.append("stale")
            if missing:
                tokens.append("_" if missing == 1 else f"_x{missing}")
            i, present = j, False
            continue
        j = i + 1
        step = points[j] - points[i] if j < len(points) and points[j] is not None else 0
        while j < len(points) and points[j] is not None and points[j] - points[j - 1] == step:
            j += 1
        start, count = _number(points[i]), j - i - 1
        if count == 0:
            tokens.append(start)
        elif step == 0:
            tokens.append(f"{start}x{count}")
        else:
            tokens.append(f"{start}{'+' if step > 0 else '-'}{_number(abs(step))}x{count}")
        i, present = j, True
    return " ".join(tokens)


def _number(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def selector(name: str, labels: dict[str, str]) -> str:
    ordered = sorted(labels, key=lambda k: (LABEL_ORDER + (k,)).index(k))
    return "%s{%s}" % (name, ", ".join(f'{k}="{labels[k]}"' for k in ordered))


@dataclass
class Target:
    """One scrape target over `minutes` minutes: it exists from `start` until `end` (service
    discovery), its scrapes at the minutes in `lost` fail (a timeout, or the pod restarting)."""

    job: str
    instance: str
    labels: dict[str, str]
    minutes: int
    lost: set[int] = field(default_factory=set)
    samples: int | None = None  # scrape_samples_scraped of a successful scrape
    start: int = 0
    end: int | None = None
    series: list[dict] = field(default_factory=list)

    def exists(self, m: int) -> bool:
        return self.start <= m and (self.end is None or m < self.end)

    def add(self, name: str, values: Values, **labels: str) -> Target:
        """A series the target exposes: a constant, or a function of the minute (None: not
        exposed that minute)."""
        at = values if callable(values) else (lambda m: values)
        points = [
            at(m) if self.exists(m) and m not in self.lost else None
            for m in range(self.minutes + 1)
        ]
        all_labels = {"job": self.job, "instance": self.instance, **self.labels, **labels}
        self.series.append({"series": selector(name, all_labels), "values": encode(points)})
        return self

    def input_series(self) -> list[dict]:
        """Its series with the ones Prometheus adds per target."""
        base = {"job": self.job, "instance": self.instance, **self.labels}
        own = [
            {
                "series": selector("up", base),
                "values": encode(
                    [
                        (0 if m in self.lost else 1) if self.exists(m) else None
                        for m in range(self.minutes + 1)
                    ]
                ),
            }
        ]
        if self.samples is not None:
            own.append(
                {
                    "series": selector("scrape_samples_scraped", base),
                    "values": encode(
                        [
                            (0 if m in self.lost else self.samples) if self.exists(m) else None
                            for m in range(self.minutes + 1)
                        ]
                    ),
                }
            )
        return own + self.series


def every(period: int, offset: int, minutes: int) -> set[int]:
    """Scrapes that time out every `period` minutes."""
    return {m for m in range(minutes + 1) if m % period == offset}


def counter(per_minute: float, resets: Iterable[int] = (), start: float = 0) -> Callable:
    """A counter rising `per_minute`, back to 0 at each minute in `resets` (its process
    restarted and counts from zero)."""
    resets = sorted(resets)

    def at(m: int) -> float:
        since = max([r for r in resets if r <= m], default=None)
        return (start + per_minute * m) if since is None else per_minute * (m - since)

    return at


def firing(rules: dict, alert: str, labels: dict, description: str) -> dict:
    return {
        "exp_labels": labels,
        "exp_annotations": {
            "summary": summaries(rules)[alert],
            "description": description,
            "runbook_url": RUNBOOK + alert.lower(),
        },
    }


def summaries(rules: dict) -> dict[str, str]:
    return {
        r["alert"]: r["annotations"]["summary"]
        for g in rules["groups"]
        for r in g["rules"]
        if "alert" in r
    }


def test_file(tests: list[dict], order: list[str], rules_dir=REPO / "rules", extra=()) -> dict:
    return {
        "rule_files": [str(rules_dir / f) for f in RULE_FILES + tuple(extra)],
        "evaluation_interval": "1m",
        "group_eval_order": order,
        "tests": tests,
    }
