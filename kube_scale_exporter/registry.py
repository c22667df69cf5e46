"""The collector registry: what a collector is, how it is registered and switched on.

Each collector is one module under kube_scale_exporter/collectors/ that defines a subclass of
`Collector` decorated with `@register`. Registration gives it the flags
`--collector.NAME` / `--no-collector.NAME`; its own options come from `add_arguments`.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import ClassVar, Iterable

from prometheus_client.core import Metric

MODES = ("node", "cluster")


class UsageError(Exception):
    """A bad flag or flag combination; the message starts with the flag at fault.

    The CLI turns it into exit status 2, like argparse's own errors.
    """


@dataclass(frozen=True)
class Finding:
    """One line of `kube-scale-exporter check` output.

    severity is "info" (what was found), "warning" or "critical" (something to change;
    these make `check` exit 1). `advice` says what to change, concretely.
    """

    severity: str
    summary: str
    advice: str = ""

    @property
    def actionable(self) -> bool:
        return self.severity in ("warning", "critical")


class Collector:
    """Base class for a collector: override `collect`, the rest is optional."""

    name: ClassVar[str]
    modes: ClassVar[frozenset] = frozenset({"node"})
    default_enabled: ClassVar[bool] = False
    # Said after "default on" in --help when `enabled_by_default` looks at the host.
    default_condition: ClassVar[str] = ""
    help: ClassVar[str] = ""

    @classmethod
    def add_arguments(cls, group: argparse._ArgumentGroup) -> None:
        """Add the collector's own flags, always with an explicit dest=."""

    @classmethod
    def enabled_by_default(cls, args: argparse.Namespace) -> bool:
        """Whether it runs when no flag decides; override to look for its source."""
        return cls.default_enabled

    @classmethod
    def enabled_by(cls, args: argparse.Namespace) -> bool:
        """True when the user's options ask for this collector (e.g. endpoints given)."""
        return False

    @classmethod
    def validate(cls, args: argparse.Namespace) -> None:
        """Raise UsageError("--flag: why") for bad option values."""

    def __init__(self, args: argparse.Namespace):
        self.args = args

    def start(self) -> None:
        """Start background refreshes; called once before the first scrape."""

    def collect(self) -> Iterable[Metric]:
        """Yield metric families for one scrape; raise to mark this collector failed."""
        raise NotImplementedError

    def findings(self) -> list[Finding]:
        """What `check` should tell a person, after a successful `collect`."""
        return []

    def close(self) -> None:
        """Stop background work and release sockets."""


_REGISTRY: dict[str, type[Collector]] = {}


def register(cls: type[Collector]) -> type[Collector]:
    if cls.name in _REGISTRY:
        raise ValueError(f"collector {cls.name!r} registered twice")
    if not cls.modes or not set(cls.modes) <= set(MODES):
        raise ValueError(f"collector {cls.name!r} has bad modes {cls.modes!r}")
    _REGISTRY[cls.name] = cls
    return cls


def registered() -> dict[str, type[Collector]]:
    """All registered collectors by name, importing the collector modules first."""
    import kube_scale_exporter.collectors  # noqa: F401,PLC0415  (registers by import)

    return dict(sorted(_REGISTRY.items()))


def _dest(name: str) -> str:
    return "collector_" + name.replace("-", "_")


def add_collector_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--collector.disable-defaults", dest="collector_disable_defaults",
        action="store_true",
        help="Switch off every collector that is on by default; enable the ones you want "
             "with --collector.NAME.",
    )
    for name, cls in registered().items():
        group = parser.add_argument_group(f"collector {name}", cls.help or None)
        default = f"on{cls.default_condition}" if cls.default_enabled else "off"
        modes = "/".join(sorted(cls.modes))
        group.add_argument(
            f"--collector.{name}", dest=_dest(name), action=argparse.BooleanOptionalAction,
            default=None,
            help=f"Enable the {name} collector ({modes} mode; default {default}).",
        )
        cls.add_arguments(group)


def enabled_collectors(args: argparse.Namespace) -> list[type[Collector]]:
    """The collector classes to run for these options; UsageError on contradictions."""
    chosen = []
    for name, cls in registered().items():
        explicit = getattr(args, _dest(name))
        asked = cls.enabled_by(args)
        in_mode = args.mode in cls.modes
        if explicit is True or (explicit is None and asked):
            if not in_mode:
                why = "is enabled" if explicit else "has its options set"
                raise UsageError(
                    f"--collector.{name}: the {name} collector {why} but runs only in "
                    f"--mode {'/'.join(sorted(cls.modes))}, not --mode {args.mode}"
                )
            chosen.append(cls)
        elif (explicit is None and in_mode and not args.collector_disable_defaults
              and cls.enabled_by_default(args)):
            chosen.append(cls)
    for cls in chosen:
        cls.validate(args)
    return chosen
