"""containerd's image pull settings, read from its config file and the files it imports.

Two settings decide how a big image pulls: how many layers download at once
(max_concurrent_downloads, default 3) and how long a pull may make no progress before
the CRI plugin cancels it (image_pull_progress_timeout, default 5m; "0" disables it).
Where they live and how imports merge depends on containerd's version, checked against
`containerd config dump` and real CRI pulls of trixie's 1.7.24, 2.3.7 and 2.4.2
(tests/imagepull; 2.0-2.2's rules were checked on sid's 2.1.9 until 2026-12):

- 1.x reads config version 2: both under [plugins."io.containerd.grpc.v1.cri"]. An
  imported file's plugin section replaces the whole section of the same plugin; a missing
  import stops containerd; a relative import is resolved against containerd's working
  directory, "/" under systemd (2.x: against the importing file's directory). 1.6 has
  no progress timeout at all (it came in 1.7): a stalled pull waits forever, exported
  as 0.
- 2.x merges files key by key. 2.0-2.2 read versions 2 and 3: the version of the last
  file that sets one wins, and a merged version 2 is migrated ([...grpc.v1.cri] keys move
  to [plugins."io.containerd.cri.v1.images"]). 2.3 and 2.4 read versions 2, 3 and 4 (the
  one their `config default` writes: the servers' sockets move into server plugins) and
  migrate each file before merging: the [...grpc.v1.cri] keys of a version 2 or 3 file
  move to the images plugin, a version 4 file's stay where no plugin reads them.
- 2.x's CRI pulls through the transfer service, which takes max_concurrent_downloads
  from [plugins."io.containerd.transfer.v1.local"], unless use_local_image_pull is true
  or the images plugin holds a setting the transfer service lacks (FALLBACKS: e.g. a
  max_concurrent_downloads other than 3, registry mirrors); then the CRI pulls itself
  with the images plugin's max_concurrent_downloads, and containerd logs "Falling back
  to local image pull mode" once at start (`config dump` still says
  use_local_image_pull = false).

A config version above NEWEST_VERSION is one no containerd this exporter knows reads:
UnknownConfigVersion, which fails the collector rather than guess at its keys.
"""

from __future__ import annotations

import glob
import os
import tomllib
from dataclasses import dataclass

from kube_scale_exporter.containerd import hostsdir
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
# The newest config version a containerd this exporter knows reads (2.3 and 2.4: 4).
NEWEST_VERSION = 4
# The keys containerd 2's migration moves from a version 2 or 3 file's [...grpc.v1.cri]
# (and its `containerd` table) to the images plugin, as far as the settings below read them.
MIGRATED = ("max_concurrent_downloads", "image_pull_progress_timeout", "registry")
MIGRATED_FROM_CONTAINERD = ("disable_snapshot_annotations", "discard_unpacked_layers")


class ConfigError(Exception):
    """The config could not be read or understood; the message names the file."""


class UnknownConfigVersion(ConfigError):
    """A config version newer than any containerd this exporter knows reads: its keys may
    mean something else, so nothing is read from it and the collector fails, naming it."""


@dataclass(frozen=True)
class PullSettings:
    max_concurrent_downloads: int  # 0: no limit
    progress_timeout: float | None  # seconds; 0: never; None: unknown (1.6 or 1.7?)
    downloads_key: str  # the setting in force, e.g. "plugins.'...transfer.v1.local'..."
    # containerd 2: the CRI pulls through the transfer service (True), or itself (False:
    # use_local_image_pull, or a fallback); 1.x always pulls itself (False).
    transfer: bool = False
    fallback: str | None = None  # why 2.x pulls itself though use_local_image_pull is false
    files: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()  # imports not found (containerd would not start): not mounted?
    # Which pull the CRI takes: transfer, local, or unknown (a version 2 file, the version
    # not known: 1.x pulls locally, 2.x through the transfer service); why (PULL_REASONS).
    pull_path: str = "local"
    pull_reason: str = "containerd_1"
    # The CRI's registry config_path in force and who set it (config_path_in_force).
    config_path: str | None = ""
    config_path_set_by: str = "none"
    major: int | None = 1  # the major version read for; None: a version 2 file, not known
    config_version: int = 2  # the main file's


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
    (2.x), globs expanded in lexical order (as Go's filepath.Glob); plain paths that do
    not exist go to `missing` (containerd does not start with one, 1.7, 2.3 and 2.4
    alike, while `config dump` ignores it and the imports after it: here the file is
    more likely not mounted, so they are reported, not fatal)."""
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


def _version(path: str, doc: dict) -> int:
    """A file's config version (containerd reads a file without one as version 1);
    UnknownConfigVersion when it is newer than NEWEST_VERSION or not a number."""
    value = doc.get("version", 1)
    if not isinstance(value, int) or isinstance(value, bool) or value > NEWEST_VERSION:
        raise UnknownConfigVersion(
            f"{path}: config version {str(value)[:32]} is not one this exporter knows "
            f"(2 to {NEWEST_VERSION}; containerd 2.3 and 2.4 read up to {NEWEST_VERSION})"
        )
    return value


def _migrated(doc: dict) -> dict:
    """A file's images plugin table once containerd 2 migrated it: the [...grpc.v1.cri]
    keys read here move over it (a version 2 or 3 file, on 2.3+; the merged config of
    version 2, on 2.0-2.2)."""
    plugins = _table(doc, "plugins")
    images = dict(_table(plugins, IMAGES))
    cri = _table(plugins, CRI_V2)
    images.update({k: cri[k] for k in MIGRATED if k in cri})
    old = _table(cri, "containerd")
    images.update({k: old[k] for k in MIGRATED_FROM_CONTAINERD if k in old})
    return images


# The images plugin's settings the transfer service lacks: with any of them the CRI pulls
# itself (containerd 2's CheckLocalImagePullConfigs, the same from 2.1 to 2.4, in its
# order: the first found is the one containerd logs).
FALLBACKS = (
    ("disable_snapshot_annotations", lambda v: v is False, "disable_snapshot_annotations = false"),
    ("discard_unpacked_layers", lambda v: v is True, "discard_unpacked_layers = true"),
    ("registry", lambda v: bool(_table(v, "mirrors")), "registry.mirrors"),
    ("registry", lambda v: bool(_table(v, "configs")), "registry.configs"),
    ("registry", lambda v: bool(_table(v, "auths")), "registry.auths"),
    ("max_concurrent_downloads", lambda v: v != DEFAULT_DOWNLOADS, None),
    ("image_pull_with_sync_fs", lambda v: v is True, "image_pull_with_sync_fs = true"),
)
# Why the CRI pulls the way it does (the pull path's `reason` label, a fixed set): 2.x's
# default, the setting, each fallback by the key containerd logs, or 1.x (local only).
PULL_REASONS = (
    "default",
    "use_local_image_pull",
    "disable_snapshot_annotations",
    "discard_unpacked_layers",
    "registry_mirrors",
    "registry_configs",
    "registry_auths",
    "max_concurrent_downloads",
    "image_pull_with_sync_fs",
    "containerd_1",
    "version_unknown",
)


def _fallback(images: dict) -> tuple[str, str] | None:
    """(what containerd logs, the reason label) of the images plugin setting that makes
    containerd 2's CRI pull without the transfer service, None when none does."""
    for key, present, said in FALLBACKS:
        if key in images and present(images[key]):
            text = said or f"{key} = {images[key]!r}"
            return text, text.split(" = ")[0].replace(".", "_")
    return None


def _registry(images: dict, where: str) -> tuple[str, bool]:
    """(registry.config_path as written, "" when unset; whether legacy mirrors are set)."""
    registry = _table(images, "registry")
    value = registry.get("config_path", "")
    if not isinstance(value, str):
        raise ConfigError(f"{where} registry.config_path is {value!r}, not a path list")
    return value, bool(_table(registry, "mirrors"))


def config_path_in_force(value: str, mirrors: bool, major, minor) -> tuple[str | None, str]:
    """(the CRI's config_path in force, set by: config, default, none or unknown). Unset,
    it is empty on 1.x and 2.0-2.1 and, from 2.2, DEFAULT_CONFIG_PATH unless legacy
    mirrors are set (containerd's plugins/cri/images); None when that turns on a version
    not known (`major` or `minor` None)."""
    if value:
        return value, "config"
    if mirrors or major == 1 or (major == 2 and minor is not None and minor < 2):
        return "", "none"
    if major is None or minor is None:
        return None, "unknown"
    return hostsdir.DEFAULT_CONFIG_PATH, "default"


def settings(path: str, version: tuple[int, int | None] | None) -> PullSettings:
    """The pull settings containerd `version` (major, minor; minor None when only the
    major is known) reads from `path`; None: unknown, decided by the main file's version
    (3 and 4 are containerd 2, read as 2.3+; 4 is 2.3+)."""
    main_version = _version(path, _load(path))
    major = version[0] if version else (2 if main_version >= 3 else None)
    minor = version[1] if version else (3 if main_version >= 4 else None)
    rules = (major, minor) if major and minor is not None else (2, 3) if major == 2 else None
    missing: list[str] = []
    files = load_files(path, missing, rules[0] if rules else 1)
    versions = [_version(name, doc) for name, doc in files]
    found = {"files": tuple(name for name, _ in files), "missing": tuple(missing)}
    if rules is None or rules[0] < 2:
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
        if rules is not None:
            timeout = _timeout(cri, where) if rules >= (1, 7) else 0.0
        value, mirrors = _registry(cri, where)
        pull = ("local", "containerd_1")
        if major is None:
            # 1.x or 2.x: local on both only when 2.x would fall back (or is told to).
            as_2 = _migrated({"plugins": plugins})
            fallback = _fallback(as_2)
            pull = ("unknown", "version_unknown")
            if as_2.get("use_local_image_pull") is True:
                pull = ("local", "use_local_image_pull")
            elif fallback:
                pull = ("local", fallback[1])
        config_path, set_by = config_path_in_force(value, mirrors, major, minor)
        return PullSettings(
            _downloads(cri, where),
            timeout,
            f"plugins.'{CRI_V2}'.max_concurrent_downloads",
            pull_path=pull[0],
            pull_reason=pull[1],
            config_path=config_path,
            config_path_set_by=set_by,
            major=major,
            config_version=main_version,
            **found,
        )
    newest = NEWEST_VERSION if rules >= (2, 3) else 3
    for (name, _), file_version in zip(files, versions, strict=True):
        if file_version < 2 or file_version > newest:
            raise ConfigError(
                f"{name}: config version {file_version}; containerd "
                f"{rules[0]}.{rules[1]} reads versions 2 to {newest}"
            )
    merged: dict = {}
    if newest == NEWEST_VERSION:
        # 2.3+: each file is migrated to version 4 before it is merged.
        for (_, doc), file_version in zip(files, versions, strict=True):
            doc = dict(doc)
            if file_version < 4:
                doc["plugins"] = {**_table(doc, "plugins"), IMAGES: _migrated(doc)}
            _deep_merge(merged, doc)
        images = _table(merged, "plugins", IMAGES)
    else:
        for _, doc in files:
            _deep_merge(merged, doc)
        # 2.0-2.2: the merged config, of the last file's version, is migrated if it is 2.
        images = (
            _migrated(merged) if merged.get("version") == 2 else _table(merged, "plugins", IMAGES)
        )
    plugins = _table(merged, "plugins")
    where = f'{path}: [plugins."{IMAGES}"]'
    timeout = _timeout(images, where)
    value, mirrors = _registry(images, where)
    config_path, set_by = config_path_in_force(value, mirrors, 2, minor)
    registry = {
        "config_path": config_path,
        "config_path_set_by": set_by,
        "major": 2,
        "config_version": main_version,
        **found,
    }
    local = images.get("use_local_image_pull") is True
    fallback = None if local else _fallback(images)
    if local or fallback:
        return PullSettings(
            _downloads(images, where),
            timeout,
            f"plugins.'{IMAGES}'.max_concurrent_downloads",
            fallback=fallback[0] if fallback else None,
            pull_path="local",
            pull_reason=fallback[1] if fallback else "use_local_image_pull",
            **registry,
        )
    return PullSettings(
        _downloads(_table(plugins, TRANSFER), f'{path}: [plugins."{TRANSFER}"]'),
        timeout,
        f"plugins.'{TRANSFER}'.max_concurrent_downloads",
        transfer=True,
        pull_path="transfer",
        pull_reason="default",
        **registry,
    )


def parse_version(text: str) -> tuple[int, int] | None:
    """(major, minor) of containerd's version string ("1.7.24~ds1", "v2.3.7")."""
    parts = text.strip().removeprefix("v").split(".")
    try:
        return int(parts[0]), int(parts[1].split("-")[0].split("~")[0].split("+")[0])
    except (IndexError, ValueError):
        return None
