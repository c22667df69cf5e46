"""containerd's registry host directories (`<root>/<registry>/hosts.toml`) and whether
containerd reads them when the CRI pulls.

A P2P cache (Spegel, Dragonfly) or a pull-through mirror is configured by writing
`<root>/<registry>/hosts.toml`: `server` (the upstream, tried last) and one `[host."URL"]`
table per mirror, tried first. Which roots containerd looks in, and whether it looks at
all, depends on its version and on which of its two pull paths the CRI takes (checked
against real CRI pulls of 1.7.24, 2.1.9, 2.3.7 and 2.4.2, tests/imagepull/test_mirrors.py;
containerd's internal/cri/server/images and core/remotes/docker/config):

- the root list is the CRI's `registry.config_path`, split on ":". Unset, it is empty up
  to 2.1 (no root: the directories are not read at all) and, from 2.2, the built-in
  DEFAULT_CONFIG_PATH, unless legacy `registry.mirrors` are set;
- the local pull (1.x always; 2.x with use_local_image_pull or a fallback) splits the
  list and, per registry, takes the first root that has `<host>_<port>_`, `<host>` or
  `_default`;
- the transfer service (2.x's default) takes config_path as ONE directory: a list of two
  is looked up as a literal path, nothing is found, and every pull goes upstream with
  nothing logged above debug;
- a hosts.toml that does not parse is logged and skipped (only its certificates count).

Bounded: at most MAX_ROOTS roots, MAX_ENTRIES names read from each (a root of 100,000
directories costs that many names, no more), MAX_DIRS registry directories parsed and
exported (the rest counted), each hosts.toml capped at HOSTS_TOML_BYTES; a FIFO, a device
or a symlink loop is reported by name and never blocks.
"""

from __future__ import annotations

import errno
import os
import stat
import tomllib
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from kube_scale_exporter.files import HOSTS_TOML_BYTES, FileRefused, read_capped

# containerd 2.2+'s config_path when the config sets none (and no legacy mirrors): Docker's
# directory second, for compatibility.
DEFAULT_ROOTS = ("/etc/containerd/certs.d", "/etc/docker/certs.d")
DEFAULT_CONFIG_PATH = ":".join(DEFAULT_ROOTS)
MAX_ROOTS = 4  # config_path entries read; the default roots are always looked at too
MAX_ENTRIES = 1000  # names read from one root
MAX_DIRS = 10  # registry directories parsed and exported, in root then name order
MAX_HOSTS = 64  # [host] tables counted in one file
DEFAULT_DIR = "_default"
# Spegel keeps what it replaced here (`spegel configuration`); not a registry.
SPEGEL_BACKUP = "_backup"
DOCKER_HUB = {"docker.io", "registry-1.docker.io", "index.docker.io"}

# Why containerd does not read a directory (the `reason` label; one of these, fixed).
USED = "config_path"
REASONS = (
    USED,
    "no_config_path",  # config_path empty: 1.x and 2.0-2.1 by default, or legacy mirrors set
    "not_in_config_path",  # a root the config_path does not list
    "transfer_path_colon_list",  # 2.x transfer service, config_path of several directories
    "shadowed",  # local pull: an earlier root has this registry (or _default)
    "hosts_toml_invalid",  # does not parse: containerd logs it and skips it
    "unreadable",  # this exporter could not read it (FIFO, loop, too big, permission)
    "version_unknown",  # the verdict depends on containerd's version, not known here
)
VERDICTS = ("used", "ignored", "unknown")
WRITERS = ("spegel", "dragonfly", "other")


@dataclass(frozen=True)
class RegistryDir:
    root: str
    name: str  # the directory's name: docker.io, 127.0.0.1_5000_, _default
    registry: str  # the host it configures: docker.io, 127.0.0.1:5000, _default
    mirrors: int = 0  # [host] tables that pull or resolve
    upstream_last: bool = True  # the registry itself stays the last host tried
    writer: str = "other"
    verdict: str = "unknown"
    reason: str = "unreadable"
    error: str | None = None  # what could not be read, naming the path


@dataclass
class HostDirs:
    """What the roots hold and what containerd makes of it."""

    config_path: str | None  # in force; None: unknown (depends on the version)
    set_by: str  # config, default (built in), none (empty), unknown
    roots: tuple[str, ...]  # in config_path order, then the default roots not in it
    dirs: list[RegistryDir]  # at most MAX_DIRS
    unlisted: int = 0  # registry directories found past MAX_DIRS (at least: MAX_ENTRIES)
    problems: list[str] = field(default_factory=list)  # roots not read, by name and why
    # Set in the config's config_path, absent here (2.2+'s default roots are often absent).
    missing_roots: list[str] = field(default_factory=list)


def registry_of(name: str) -> str:
    """The registry host a directory configures: `host_port_` is `host:port`."""
    if name.endswith("_") and name.count("_") >= 2:
        host, _, port = name[:-1].rpartition("_")
        if host and port.isdigit():
            return f"{host}:{port}"
    return name


def _host_of(url: str) -> str:
    if "://" not in url:
        url = "https://" + url
    try:
        return urlsplit(url).netloc.lower()
    except ValueError:
        return ""


def _same_registry(registry: str, host: str) -> bool:
    return host == registry or (registry in DOCKER_HUB and host in DOCKER_HUB)


def _writer(doc: dict, hosts: dict, backup: bool) -> str:
    for table in hosts.values():
        header = table.get("header") if isinstance(table, dict) else None
        if isinstance(header, dict) and any(k.lower() == "x-dragonfly-registry" for k in header):
            return "dragonfly"
    # Spegel writes each target with dial_timeout = '200ms' and keeps what it replaced in
    # <root>/_backup.
    timeouts = [t.get("dial_timeout") for t in hosts.values() if isinstance(t, dict)]
    if hosts and (backup or all(t == "200ms" for t in timeouts)) and "200ms" in timeouts:
        return "spegel"
    return "other"


def _read(root: str, name: str, backup: bool) -> RegistryDir:
    """A registry directory's hosts.toml: mirrors, upstream, writer; verdict left to
    `judge`. A directory without hosts.toml holds certificates only: no mirror."""
    registry = registry_of(name)
    path = os.path.join(root, name)
    try:
        data = read_capped(os.path.join(path, "hosts.toml"), HOSTS_TOML_BYTES, "HOSTS_TOML_BYTES")
    except FileNotFoundError:
        return RegistryDir(root, name, registry, reason="")
    except FileRefused as exc:
        return RegistryDir(root, name, registry, error=str(exc))
    except OSError as exc:
        return RegistryDir(root, name, registry, error=f"{path}/hosts.toml: {exc.strerror}")
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as exc:
        return RegistryDir(
            root,
            name,
            registry,
            verdict="ignored",
            reason="hosts_toml_invalid",
            error=f"{path}/hosts.toml: {str(exc)[:200]}",
        )
    hosts = doc.get("host")
    hosts = dict(list(hosts.items())[:MAX_HOSTS]) if isinstance(hosts, dict) else {}
    mirrors = 0
    for table in hosts.values():
        caps = (
            table.get("capabilities", ["pull", "resolve", "push"])
            if isinstance(table, dict)
            else []
        )
        if isinstance(caps, list) and ({"pull", "resolve"} & set(map(str, caps))):
            mirrors += 1
    server = doc.get("server")
    # Unset, containerd tries the registry itself last; set, that server instead (under
    # _default, one server for every registry: none of them is tried).
    upstream_last = (
        not isinstance(server, str)
        or not server
        or (name != DEFAULT_DIR and _same_registry(registry, _host_of(server)))
    )
    return RegistryDir(
        root,
        name,
        registry,
        mirrors=mirrors,
        upstream_last=upstream_last,
        writer=_writer(doc, hosts, backup),
        reason="",
    )


def _scan(root: str) -> tuple[list[str], bool, int, str | None]:
    """(directory names up to MAX_ENTRIES, has _backup, names past the cap, problem)."""
    names, more, backup = [], 0, False
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                if len(names) >= MAX_ENTRIES:
                    more += 1
                    if more >= MAX_ENTRIES:  # counted this far, no further
                        break
                    continue
                if entry.name == SPEGEL_BACKUP:
                    backup = True
                    continue
                names.append(entry.name)
    except FileNotFoundError:
        return [], False, 0, None
    except OSError as exc:
        why = "a symlink loop" if exc.errno == errno.ELOOP else exc.strerror
        if exc.errno == errno.ENOTDIR:
            why = "not a directory"
        return [], False, 0, f"{root}: {why}"
    return names, backup, more, None


def _kind(root: str, name: str) -> str | None:
    """'dir', None (not a directory: skipped, as containerd finds no hosts.toml under a
    file) or the error that containerd's own stat would meet too."""
    try:
        st = os.stat(os.path.join(root, name))
    except OSError as exc:
        if exc.errno == errno.ENOENT:  # a dangling symlink: containerd skips it too
            return None
        return "a symlink loop" if exc.errno == errno.ELOOP else exc.strerror
    return "dir" if stat.S_ISDIR(st.st_mode) else None


def judge(d: RegistryDir, entries: list[str] | None, path: str, earlier: set[str]) -> RegistryDir:
    """The verdict on one directory: `entries` the config_path in force (None: unknown),
    `path` the pull path (transfer, local, unknown), `earlier` the registry directories
    of the roots before this one in config_path."""

    def said(verdict, reason):
        return replace(d, verdict=verdict, reason=reason)

    if entries is None:
        # Unset config_path, minor version unknown: 2.0-2.1 read no root, 2.2+ the
        # colon list, which the transfer service ignores either way.
        return said("ignored" if path == "transfer" else "unknown", "version_unknown")
    if not entries:
        return said("ignored", "no_config_path")
    if d.root not in entries:
        return said("ignored", "not_in_config_path")
    if len(entries) > 1 and path != "local":
        if path == "transfer":
            return said("ignored", "transfer_path_colon_list")
        return said("unknown", "version_unknown")
    if d.name in earlier or DEFAULT_DIR in earlier:
        return said("ignored", "shadowed")
    if d.reason == "hosts_toml_invalid":
        return d
    if d.error:
        return said("unknown", "unreadable")
    return said("used", USED)


def read_host_dirs(config_path: str | None, set_by: str, path: str, prefix: str = "") -> HostDirs:
    """The registry directories of the roots containerd would read, and those of the
    default roots it may ignore, each judged (see the module docstring). `prefix`: where
    the host's / is, for a reader that sees it elsewhere (the tests' private roots)."""
    entries = None if config_path is None else [e for e in config_path.split(":") if e]
    listed = (entries or [])[:MAX_ROOTS]
    roots = tuple(dict.fromkeys([*listed, *DEFAULT_ROOTS]))
    out = HostDirs(config_path, set_by, roots, [])
    seen: dict[str, set[str]] = {}
    found: list[tuple[str, str, bool]] = []
    for root in roots:
        here = prefix + root
        names, backup, more, problem = _scan(here)
        if problem:
            out.problems.append(problem.removeprefix(prefix))
        elif root in listed and set_by == "config" and not os.path.isdir(here):
            out.missing_roots.append(root)
        out.unlisted += more
        dirs = []
        for name in sorted(names):
            kind = _kind(here, name)
            if kind == "dir":
                dirs.append(name)
            elif kind is not None:
                out.problems.append(f"{os.path.join(root, name)}: {kind}")
        seen[root] = set(dirs)
        found += [(root, name, backup) for name in dirs]
    out.unlisted += max(0, len(found) - MAX_DIRS)
    for root, name, backup in found[:MAX_DIRS]:
        earlier: set[str] = set()
        if entries and root in entries:
            for before in entries[: entries.index(root)]:
                earlier |= seen.get(before, set())
        d = _read(prefix + root, name, backup)
        if prefix:
            error = d.error.replace(prefix, "", 1) if d.error else None
            d = replace(d, root=root, error=error)
        out.dirs.append(judge(d, entries, path, earlier))
    return out
