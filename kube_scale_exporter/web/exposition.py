"""The two exposition formats /metrics serves, chosen by the scraper's Accept header.

Prometheus text 0.0.4 by default (1.0.0 when asked, which differs only in the name
escaping it may carry), OpenMetrics 1.0.0 on `application/openmetrics-text`. The
negotiation and every byte of the output are prometheus_client 0.26's for the families
kube_scale_exporter/metrics.py builds, so scrapes did not change when it was dropped from
the package (tests/web/test_exposition.py compares the two).

A scraper may ask for a name escaping scheme (`escaping=` in Accept). Our names are
plain legacy names (metrics.py checks them), so only two schemes change anything:
`dots` doubles every underscore, `values` also prefixes OpenMetrics sample names with
`U__`, as prometheus_client does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from kube_scale_exporter.metrics import Family

UNDERSCORES = "underscores"
ESCAPINGS = frozenset({"allow-utf-8", UNDERSCORES, "dots", "values"})

TEXT_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"
TEXT_1_0_0 = "text/plain; version=1.0.0; charset=utf-8"
OPENMETRICS_1_0_0 = "application/openmetrics-text; version=1.0.0; charset=utf-8"

Encoder = Callable[[Iterable[Family]], bytes]


def go_float(value: float) -> str:
    """A value as Go's strconv formats it for Prometheus: +Inf, -Inf, NaN, and an
    exponent from 1e+07 on (Python's repr switches only at 1e+16)."""
    value = float(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:
        digits = (text[:dot] + text[dot + 1 :]).rstrip("0")
        mantissa = f"{digits[0]}.{digits[1:]}".rstrip(".")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _quoted(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _name(name: str, escaping: str) -> str:
    """A metric or label name in HELP, TYPE and label pairs."""
    return name.replace("_", "__") if escaping == "dots" else name


def _openmetrics_sample_name(name: str, escaping: str) -> str:
    if escaping == "values":
        return "U__" + name.replace("_", "__")
    return _name(name, escaping)


def _labels(labels: dict[str, str], escaping: str) -> str:
    if not labels:
        return ""
    pairs = ",".join(f'{_name(k, escaping)}="{_quoted(v)}"' for k, v in sorted(labels.items()))
    return "{" + pairs + "}"


def encode_text(families: Iterable[Family], escaping: str = UNDERSCORES) -> bytes:
    """Prometheus text format; a counter's HELP and TYPE name its `_total` series."""
    out = []
    for family in families:
        name = family.name + "_total" if family.type == "counter" else family.name
        name = _name(name, escaping)
        help_text = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {family.type}\n")
        out.extend(
            f"{_name(s.name, escaping)}{_labels(s.labels, escaping)} {go_float(s.value)}\n"
            for s in family.samples
        )
    return "".join(out).encode()


def encode_openmetrics(families: Iterable[Family], escaping: str = UNDERSCORES) -> bytes:
    """OpenMetrics text 1.0.0: HELP escapes quotes too, and `# EOF` ends it."""
    out = []
    for family in families:
        name = _name(family.name, escaping)
        out.append(f"# HELP {name} {_quoted(family.documentation)}\n# TYPE {name} {family.type}\n")
        out.extend(
            f"{_openmetrics_sample_name(s.name, escaping)}{_labels(s.labels, escaping)}"
            f" {go_float(s.value)}\n"
            for s in family.samples
        )
    out.append("# EOF\n")
    return "".join(out).encode()


def _parameter(parameters: list[str], key: str) -> str:
    """The first `key=value` of a media range's parameters, "" without one."""
    for parameter in parameters:
        if "=" in parameter:
            name, value = parameter.strip().split("=", 1)
            if name == key:
                return value
    return ""


def _at_least_1_0_0(version: str) -> bool:
    """Whether a version parameter is 1.0.0 or later, its parts compared as numbers. One
    whose deciding part is no number (1.x) is not: prometheus_client failed the request."""
    for part, least in zip(version.split("."), (1, 0, 0), strict=False):
        try:
            number = int(part)
        except ValueError:
            return False
        if number != least:
            return number > least
    return version.count(".") >= 2


def choose_encoder(accept: str | None) -> tuple[Encoder, str]:
    """The encoder and Content-Type for an Accept header: the first media range that is
    OpenMetrics (no version, or >= 1.0.0) or text/plain >= 1.0.0, else text 0.0.4."""

    for media_range in (accept or "").split(","):
        media_type, *parameters = media_range.split(";")
        media_type = media_type.strip()
        if media_type not in ("application/openmetrics-text", "text/plain"):
            continue
        version = _parameter(parameters, "version")
        escaping = _parameter(parameters, "escaping")
        escaping = escaping if escaping in ESCAPINGS else UNDERSCORES
        if media_type == "application/openmetrics-text" and not version:
            return encode_openmetrics, OPENMETRICS_1_0_0
        if not version or not _at_least_1_0_0(version):
            continue
        if media_type == "text/plain":
            return _with(encode_text, escaping), f"{TEXT_1_0_0}; escaping={escaping}"
        return (
            _with(encode_openmetrics, escaping),
            f"application/openmetrics-text; version={version}; charset=utf-8; escaping={escaping}",
        )
    return encode_text, TEXT_0_0_4


def _with(encoder: Callable[[Iterable[Family], str], bytes], escaping: str) -> Encoder:
    return lambda families: encoder(families, escaping)
