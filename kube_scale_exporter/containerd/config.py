"""containerd's image pull settings, read from its config file and the files it imports.

Two settings decide how a big image pulls: how many layers download at once
(max_concurrent_downloads, default 3) and how long a pull may make no progress before
the CRI plugin cancels it (image_pull_progress_timeout, default 5m; "0" disables it).
Where they live and how imports merge depends on containerd's major version, checked
against `containerd config dump` of Debian's 1.6.20 and sid's 2.1.9 (tests/imagepull):

- 1.x reads config version 2: both under [plugins."io.containerd.grpc.v1.cri"]. An
  imported file's plugin section replaces the whole section of the same plugin; a missing
  import stops containerd; a relative import is resolved against containerd's working
  directory, "/" under systemd (2.x: against the importing file's directory). 1.6 has
  no progress timeout at all (it came in 1.7): a stalled pull waits forever, exported
  as 0.
- 2.x reads versions 2 and 3: files are merged key by key, the version of the last file
  that sets one wins, and a merged version 2 is migrated ([...grpc.v1.cri] keys move to
  [plugins."io.containerd.cri.v1.images"]); a missing import is skipped. The CRI pulls
  through the transfer service unless use_local_image_pull is true, and the transfer
  service takes max_concurrent_downloads from [plugins."io.containerd.transfer.v1.local"]:
  the images plugin's value is then ignored, which is how a node loses its tuning when a
  version 2 file moves to containerd 2.
"""

from __future__ import annotations

import glob
import os
import tomllib
from dataclasses import dataclass

from kube_scale_exporter.durations import go_duration
from kube_scale_exporter.files import CONTAINERD_CONFIG_BYTES, FileRefused, read_capped

DEFAULT_CONFIG = "/etc/containerd/config.toml"
MAX_FILE_BYTES = CONTAINERD_CONFIG_BYTES  # each file, kube_scale_exporter/files.py
MAX_FILES = 64  # imports, counting globs' matches; a loop of imports is cut by `loaded`
DEFAULT_DOWNLOADS = 3
DEFAULT_TIMEOUT = "5m"
CRI_V2 = "io.containerd.grpc.v1.cri"
IMAGES = "io.containerd.cri.v1.images"
TRANSFER = "io.containerd.transfer.v1.local"


class ConfigError(Exception):
    """The config could not be read or understood; the message names the file."""


@dataclass(frozen=True)
class PullSettings:
    max_concurrent_downloads: int  # 0: no limit
    progress_timeout: float | None  # seconds; 0: never; None: unknown (1.6 or 1.7?)
    downloads_key: str  # the setting in force, e.g. "plugins.'...transfer.v1.local'..."
    ignored_downloads: int | None = None  # the images plugin's value the transfer ignores
    files: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()  # imports not found: skipped by 2.x, or not mounted


def read_file(path: str) -> bytes:
    """A regular file's bytes, at most MAX_FILE_BYTES; ConfigError otherwise (a FIFO,
    device or directory is refused without blocking)."""
    try:
        return read_capped(path, MAX_FILE_BYTES, "CONTAINERD_CONFIG_BYTES")
    except FileRefused as exc:
        raise ConfigError(str(exc)) from None  # names the path and the cap
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None


def _load(path: str) -> dict:
    try:
        return tomllib.loads(read_file(path).decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _imports(parent: str, doc: dict, missing: list[str], major: int) -> list[str]:
    """The files `doc` imports: relative to "/" (1.x) or the importing file's directory
    (2.x), globs
    expanded in lexical order (as Go's filepath.Glob); plain paths that do not exist go
    to `missing` (1.x refuses to start then, 2.x skips them; here the file may also just
    not be mounted, so they are reported, not fatal)."""
    names = doc.get("imports") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{parent}: imports is not a list of paths")
    out = []
    for name in names:
        base = os.path.dirname(parent) if major >= 2 else "/"
        path = name if os.path.isabs(name) else os.path.join(base, name)
        if any(c in path for c in "*?["):
            out += sorted(glob.glob(path))
        elif os.path.exists(path):
            out.append(path)
        else:
            missing.append(path)
    return out


def load_files(path: str, missing: list[str], major: int) -> list[tuple[str, dict]]:
    """The main file then its imports, breadth first as containerd loads them."""
    loaded, out, pending = set(), [], [path]
    while pending:
        current = pending.pop(0)
        if current in loaded:
            continue
        if len(loaded) >= MAX_FILES:
            raise ConfigError(f"{path}: more than {MAX_FILES} files imported")
        doc = _load(current)
        loaded.add(current)
        out.append((current, doc))
        pending += _imports(current, doc, missing, major)
    return out


def _deep_merge(into: dict, new: dict) -> None:
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value)
        else:
            into[key] = value


def _table(doc: dict, *keys: str) -> dict:
    for key in keys:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc if isinstance(doc, dict) else {}


def _downloads(table: dict, where: str) -> int:
    value = table.get("max_concurrent_downloads", DEFAULT_DOWNLOADS)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{where} max_concurrent_downloads is {value!r}, not a count")
    return value


def _timeout(table: dict, where: str) -> float:
    value = table.get("image_pull_progress_timeout", DEFAULT_TIMEOUT)
    try:
        if isinstance(value, str):
            return go_duration(value)
    except ValueError:
        pass
    raise ConfigError(f"{where} image_pull_progress_timeout is {value!r}, not a duration")


def settings(path: str, version: tuple[int, int] | None) -> PullSettings:
    """The pull settings containerd `version` (major, minor) reads from `path`; None:
    unknown, decided by the main file's version (3 is containerd 2)."""
    main_version = _load(path).get("version", 1)
    major = version[0] if version else (2 if main_version == 3 else 1)
    missing: list[str] = []
    files = load_files(path, missing, major)
    found = {"files": tuple(name for name, _ in files), "missing": tuple(missing)}
    if major < 2:
        if main_version != 2:
            raise ConfigError(
                f"{path}: config version {main_version!r}; containerd 1.x "
                "is read from version 2 only"
            )
        plugins: dict = {}
        for _, doc in files:
            # 1.x replaces a plugin's whole section with an imported file's.
            plugins.update(_table(doc, "plugins"))
        cri = _table(plugins, CRI_V2)
        where = f'{path}: [plugins."{CRI_V2}"]'
        timeout = None
        if version is not None:
            timeout = _timeout(cri, where) if version >= (1, 7) else 0.0
        return PullSettings(
            _downloads(cri, where), timeout, f"plugins.'{CRI_V2}'.max_concurrent_downloads", **found
        )
    merged: dict = {}
    for _, doc in files:
        _deep_merge(merged, doc)
    plugins = _table(merged, "plugins")
    images = dict(_table(plugins, IMAGES))
    if merged.get("version") == 2:
        # containerd 2's migration of a version 2 config moves these keys.
        cri = _table(plugins, CRI_V2)
        images.update(
            {
                k: cri[k]
                for k in ("max_concurrent_downloads", "image_pull_progress_timeout")
                if k in cri
            }
        )
    elif merged.get("version") != 3:
        raise ConfigError(f"{path}: config version {merged.get('version')!r}, not 2 or 3")
    where = f'{path}: [plugins."{IMAGES}"]'
    timeout = _timeout(images, where)
    if images.get("use_local_image_pull") is True:
        return PullSettings(
            _downloads(images, where),
            timeout,
            f"plugins.'{IMAGES}'.max_concurrent_downloads",
            **found,
        )
    transfer = _table(plugins, TRANSFER)
    ignored = images.get("max_concurrent_downloads")
    return PullSettings(
        _downloads(transfer, f'{path}: [plugins."{TRANSFER}"]'),
        timeout,
        f"plugins.'{TRANSFER}'.max_concurrent_downloads",
        ignored_downloads=_downloads(images, where) if ignored is not None else None,
        **found,
    )


def parse_version(text: str) -> tuple[int, int] | None:
    """(major, minor) of containerd's version string ("1.6.20~ds1", "v2.1.9")."""
    parts = text.strip().removeprefix("v").split(".")
    try:
        return int(parts[0]), int(parts[1].split("-")[0].split("~")[0].split("+")[0])
    except (IndexError, ValueError):
        return None
