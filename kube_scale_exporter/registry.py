"""What a collector is, what it declares, and how the CLI's flags switch collectors on.

A collector is a class (one module, or one small package, under collectors/) listed once in
`collectors.COLLECTORS`. Its contract, in the order the process uses it:

- class attributes: `name` (gives `--collector.NAME` / `--no-collector.NAME`), `modes`,
  `default_enabled`, `help`, and `needs`: per mode, what a pod running it must be granted
  (API access, host files, groups). deploy/ is checked against `needs`.
- classmethods on the parsed flags: `add_arguments` (its own flags), `enabled_by_default`,
  `enabled_by` (its options given), `validate` (UsageError names the bad flag: exit 2).
- `__init__(args)`, then `start()` for background refreshes.
- per scrape, in a worker thread: `observe()` reads the backends (or a cache) into a
  state object; raising marks only this collector failed. `families(state)` and
  `advise(state)` are pure functions of that state: the exposition, and what
  `kube-scale-exporter check` tells a person.
- `informers()`: the Kubernetes watches it runs, whose health each scrape reports.
- `wait_ready()`: `check` runs once, right after start; block, for a bounded time of
  the collector's choosing, until the first background refresh is in. `close()` stops threads and sockets.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from kube_scale_exporter.metrics import Family

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


@dataclass(frozen=True)
class HostPath:
    """A host file or socket a collector reads, mounted read-only into its pod.

    `type` is the hostPath type (File or Socket): the pod fails to start rather than mount
    a stray directory when the path is missing.
    """

    volume: str
    path: str
    type: str


@dataclass(frozen=True)
class Needs:
    """What a pod running the collector in one mode must be granted; nothing else is.

    rbac_rules: ClusterRole rules (`{"apiGroups", "resources", "verbs"}`) for every API
    read the collector makes. host_paths: read-only mounts. socket_group: the pod joins
    the group that owns containerd's socket. file_owner_root: it reads root-owned 0600
    files, so it runs as uid 0 with every capability dropped. args: flags the pod passes
    in that mode.
    """

    rbac_rules: tuple[Mapping[str, Sequence[str]], ...] = ()
    host_paths: tuple[HostPath, ...] = ()
    socket_group: bool = False
    file_owner_root: bool = False
    args: tuple[str, ...] = ()


class Collector:
    """Base class of every collector; the module docstring gives the contract."""

    name: ClassVar[str]
    modes: ClassVar[frozenset] = frozenset({"node"})
    default_enabled: ClassVar[bool] = False
    # Said after "default on" in --help when `enabled_by_default` looks at the host.
    default_condition: ClassVar[str] = ""
    help: ClassVar[str] = ""
    # mode -> Needs; a mode missing here needs nothing (an empty Needs).
    needs: ClassVar[Mapping[str, Needs]] = {}

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

    @classmethod
    def needs_in(cls, mode: str) -> Needs:
        return cls.needs.get(mode, Needs())

    @classmethod
    def needs_for(cls, args: argparse.Namespace) -> Needs:
        """What a pod started with these (parsed) flags needs; override where an option,
        not the mode alone, decides (e.g. etcd's --etcd.local-access=full)."""
        return cls.needs_in(args.mode)

    def __init__(self, args: argparse.Namespace):
        self.args = args

    def start(self) -> None:
        """Start background refreshes; called once before the first scrape."""

    def wait_ready(self) -> None:
        """Block, boundedly, until background data is first available (for `check`)."""

    def observe(self) -> Any:
        """Read the collector's sources into a state object for one scrape."""
        raise NotImplementedError

    @staticmethod
    def families(state: Any) -> list[Family]:
        """The exposition of a state: pure, no I/O."""
        raise NotImplementedError

    @staticmethod
    def advise(state: Any) -> list[Finding]:
        """What `check` tells a person about a state: pure, no I/O."""
        return []

    def informers(self) -> list:
        """Kubernetes informers this collector runs; their health comes with every scrape."""
        return []

    def close(self) -> None:
        """Stop background work and release sockets."""


def _dest(name: str) -> str:
    return "collector_" + name.replace("-", "_")


def add_collector_flags(
    parser: argparse.ArgumentParser, collectors: Iterable[type[Collector]]
) -> None:
    """`--collector.NAME` for each collector, then its own flags, in a group of its own."""
    parser.add_argument(
        "--collector.disable-defaults",
        dest="collector_disable_defaults",
        action="store_true",
        help="Switch off every collector that is on by default; enable the ones you want "
        "with --collector.NAME.",
    )
    for cls in sorted(collectors, key=lambda c: c.name):
        group = parser.add_argument_group(f"collector {cls.name}", cls.help or None)
        default = f"on{cls.default_condition}" if cls.default_enabled else "off"
        modes = "/".join(sorted(cls.modes))
        group.add_argument(
            f"--collector.{cls.name}",
            dest=_dest(cls.name),
            action=argparse.BooleanOptionalAction,
            default=None,
            help=f"Enable the {cls.name} collector ({modes} mode; default {default}).",
        )
        cls.add_arguments(group)


def enabled_collectors(
    args: argparse.Namespace, collectors: Iterable[type[Collector]]
) -> list[type[Collector]]:
    """The collector classes to run for these options; UsageError on contradictions."""
    chosen = []
    for cls in sorted(collectors, key=lambda c: c.name):
        name = cls.name
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
        elif (
            explicit is None
            and in_mode
            and not args.collector_disable_defaults
            and cls.enabled_by_default(args)
        ):
            chosen.append(cls)
    for cls in chosen:
        cls.validate(args)
    return chosen
