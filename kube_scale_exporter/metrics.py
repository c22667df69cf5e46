"""Metric families: what a collector returns from `families(state)` and /metrics encodes.

A family is a name, its HELP text, a type and its samples; the constructors keep
prometheus_client's signatures for the parts the collectors use (a counter's name loses
its `_total`, which its sample gets back; a histogram's buckets are (le, cumulative count)
pairs ending in "+Inf"). No `_created` sample is made: the exporter never served one.
Names are checked once, at construction, so the encoders (web/exposition.py) can rely on
them being plain legacy names: letters, digits and underscores only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import ClassVar, NamedTuple

# No colon, unlike Prometheus' full grammar: colons are for recording rules.
_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


class Sample(NamedTuple):
    name: str
    labels: dict[str, str]
    value: float


def _checked_name(name: str, what: str) -> str:
    if not _NAME.fullmatch(name) or (what == "label" and name.startswith("__")):
        raise ValueError(f"invalid {what} name {name!r}")
    return name


class Family:
    """One metric family; the typed subclasses below are what collectors build."""

    __slots__ = ("_labelnames", "documentation", "name", "samples", "type")

    def __init__(self, name: str, documentation: str, typ: str, labels: Iterable[str] = ()):
        self.name = _checked_name(name, "metric")
        self.documentation = documentation
        self.type = typ
        self._labelnames = tuple(_checked_name(label, "label") for label in labels)
        self.samples: list[Sample] = []

    def _labels(self, values: Sequence[str]) -> dict[str, str]:
        return dict(zip(self._labelnames, values, strict=True))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {len(self.samples)} samples)"


class _ValueFamily(Family):
    """Gauges and counters: one value a series, its sample named `name + SUFFIX`."""

    __slots__ = ()
    TYPE: ClassVar[str]
    SUFFIX: ClassVar[str] = ""

    def __init__(
        self,
        name: str,
        documentation: str,
        value: float | None = None,
        labels: Iterable[str] = (),
    ):
        super().__init__(name.removesuffix(self.SUFFIX), documentation, self.TYPE, labels)
        if value is not None:
            self.add_metric([], value)

    def add_metric(self, labels: Sequence[str], value: float) -> None:
        self.samples.append(Sample(self.name + self.SUFFIX, self._labels(labels), value))


class GaugeFamily(_ValueFamily):
    __slots__ = ()
    TYPE = "gauge"


class CounterFamily(_ValueFamily):
    __slots__ = ()
    TYPE = "counter"
    SUFFIX = "_total"


class HistogramFamily(Family):
    __slots__ = ()

    def __init__(
        self,
        name: str,
        documentation: str,
        buckets: Sequence[tuple[str, float]] | None = None,
        sum_value: float | None = None,
        labels: Iterable[str] = (),
    ):
        super().__init__(name, documentation, "histogram", labels)
        if buckets is not None:
            self.add_metric([], buckets, sum_value)

    def add_metric(
        self, labels: Sequence[str], buckets: Sequence[tuple[str, float]], sum_value: float | None
    ) -> None:
        """`buckets`: (le, cumulative count), sorted, the last one "+Inf". Without a sum
        (etcd's re-bucketed pages have none) the family has no _count and _sum either."""
        series = self._labels(labels)
        self.samples.extend(
            Sample(self.name + "_bucket", {**series, "le": le}, count) for le, count in buckets
        )
        if sum_value is not None:
            self.samples.append(Sample(self.name + "_count", series, buckets[-1][1]))
            self.samples.append(Sample(self.name + "_sum", series, sum_value))
