"""The image's files, as three trees, one per layer: what the Dockerfile's build stage runs
for the architecture being built (TARGETARCH), on the build machine's own.

  interpreter   bookworm's python3.11-minimal and libpython3.11-stdlib with the libraries
                they link, unpacked by mmdebstrap (no dpkg, apt, shell or maintainer script
                runs), less what DROP_PATHS lists: docs, locales, dpkg, glibc's iconv
                modules, and the stdlib modules and libraries nothing in the package imports;
                /etc/passwd and /etc/group naming the image's user
  dependencies  the dependencies' wheels (pip install --target SITE, cp311 manylinux), and
                Mozilla's CA bundle that certifi carries at the paths OpenSSL and Debian look
                for (Debian's ca-certificates writes its bundle from a maintainer script,
                which an unpacked tree never runs)
  package       the package itself
each holding only what its layer adds, byte-compiled by this python3 (the build stage's: the
same minor version as the image's, so the same bytecode) with the paths the image has.
Nothing of the target architecture runs until the end: the whole tree then imports every
module of the package, the lazily imported ones (bcrypt, h2) included, and loads the CA
bundle, in a chroot (for a foreign architecture through the kernel's binfmt_misc and
qemu-user): a dropped module fails the build, not a pod, and so does a .pyc the image's
interpreter would not take (it compiles that module again).

Run as root: python3 -m tools.image_tree OUT [ARCH]   (OUT/interpreter, OUT/dependencies,
OUT/package; ARCH, Debian's name, amd64 or arm64: this machine's unless given)
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1]  # pyproject.toml, README.md, kube_scale_exporter/
SUITE = "bookworm"
MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
VERSION = "3.11"  # the image's python, bookworm's
PACKAGES = (f"python{VERSION}-minimal", f"libpython{VERSION}-stdlib")
PYTHON = f"/usr/bin/python{VERSION}"
SITE = "usr/lib/kube-scale-exporter"  # the dependencies' and the package's own directory
LAYERS = ("interpreter", "dependencies", "package")
USER = "65534:65534"
PY = f"usr/lib/python{VERSION}"
# Each architecture's machine name: Debian's multiarch directory and the wheels' platform.
MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}
LIBS = "usr/lib/{machine}-linux-gnu"  # DROP_PATHS' {machine} is the architecture's
# Nothing the exporter imports or reads: check() imports every module in the finished tree.
DROP_PATHS = (
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
    "usr/share/dpkg",
    "var/lib/dpkg",
    "etc/dpkg",
    "usr/bin/dpkg*",
    "usr/bin/update-alternatives",
    "usr/sbin/*",
    f"{LIBS}/gconv",
    f"{PY}/test",
    f"{PY}/idlelib",
    f"{PY}/tkinter",
    f"{PY}/turtledemo",
    f"{PY}/turtle.py",
    f"{PY}/lib2to3",
    f"{PY}/ensurepip",
    f"{PY}/pydoc_data",
    f"{PY}/pydoc.py",
    f"{PY}/distutils",
    f"{PY}/sqlite3",
    f"{PY}/dbm",
    f"{PY}/curses",
    f"{PY}/config-{VERSION}-{{machine}}-linux-gnu",
    f"{PY}/lib-dynload/_sqlite3*",
    f"{PY}/lib-dynload/_dbm*",
    f"{PY}/lib-dynload/_gdbm*",
    f"{PY}/lib-dynload/_curses*",
    f"{PY}/lib-dynload/readline*",
    f"{PY}/lib-dynload/nis*",
    f"{PY}/lib-dynload/_tkinter*",
    f"{PY}/lib-dynload/xxlimited*",
    f"{PY}/lib-dynload/_test*",
    f"{PY}/lib-dynload/_xxtest*",
    f"{LIBS}/libsqlite3*",
    f"{LIBS}/libdb-5.3*",
    f"{LIBS}/libgdbm*",
    f"{LIBS}/libncurses*",
    f"{LIBS}/libform*",
    f"{LIBS}/libmenu*",
    f"{LIBS}/libpanel*",
    f"{LIBS}/libreadline*",
    f"{LIBS}/libhistory*",
    f"{LIBS}/libnsl*",
    f"{LIBS}/libtirpc*",
    f"{LIBS}/libgssapi*",
    f"{LIBS}/libkrb5*",
    f"{LIBS}/libk5crypto*",
    f"{LIBS}/libkrb5support*",
    f"{LIBS}/libcom_err*",
    f"{LIBS}/libkeyutils*",
    f"{LIBS}/krb5",
    "usr/share/readline",
    "usr/share/terminfo",
    "lib/terminfo",
    "etc/terminfo",
)
# The CA bundle's carrier: no dependency of the package's brings it, the image ships it.
CA_WHEEL = "certifi==2026.5.20"
CA_BUNDLE = "etc/ssl/certs/ca-certificates.crt"
# Where the image's OpenSSL (OPENSSLDIR /usr/lib/ssl) and Debian-minded clients look.
CA_LINKS = {
    CA_BUNDLE: f"/{SITE}/certifi/cacert.pem",
    "usr/lib/ssl/cert.pem": f"/{CA_BUNDLE}",
    "usr/lib/ssl/certs": "/etc/ssl/certs",
}
# Imported in the finished tree: every module of the package (walked; __main__ would run the
# exporter), what it imports only on some paths, and the CA bundle as ssl's default context
# loads it.
CHECK = """
import pkgutil, importlib, ssl, sys
import kube_scale_exporter
for m in pkgutil.walk_packages(kube_scale_exporter.__path__, "kube_scale_exporter."):
    if not m.name.endswith(".__main__"):
        importlib.import_module(m.name)
import bcrypt, h2.connection, h2.config, h2.events, yaml
assert yaml.__with_libyaml__, "PyYAML without its C loader"
bcrypt.checkpw(b"x", bcrypt.hashpw(b"x", bcrypt.gensalt(4)))
cas = ssl.create_default_context().cert_store_stats()["x509_ca"]
assert cas > 100, f"{cas} CA certificates in the default context"
print(f"image tree: {len(sys.modules)} modules import, {cas} CA certificates")
"""


def run(*argv, **kw):
    return subprocess.run([str(a) for a in argv], check=True, **kw)


def chroot_python(root: Path, *args, **kw):
    env = {"PATH": "/usr/bin", "PYTHONPATH": f"/{SITE}", "LANG": "C.UTF-8"}
    return run("/usr/sbin/chroot", root, PYTHON, *args, env=env, **kw)


def compile_tree(root: Path, directory: str) -> None:
    """Byte-compile root/directory with this python3, each .pyc naming its source by its path
    in the image (/directory/...), as the image's interpreter would have compiled it."""
    run(sys.executable, "-m", "compileall", "-q", "-j0", "-s", root, "-p", "/", root / directory)


def bytecode(root: Path) -> dict[Path, int]:
    return {path: path.stat().st_mtime_ns for path in root.rglob("*.pyc")}


def drop(root: Path, machine: str) -> None:
    for pattern in DROP_PATHS:
        for path in root.glob(pattern.format(machine=machine)):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    for cache in root.rglob("__pycache__"):
        shutil.rmtree(cache)


def interpreter(root: Path, arch: str) -> None:
    # The extract variant unpacks and runs no maintainer script: any architecture, no qemu.
    run(
        "mmdebstrap",
        "--quiet",
        "--mode=root",
        "--variant=extract",
        f"--architectures={arch}",
        "--include=" + ",".join(PACKAGES),
        SUITE,
        root,
        *MIRRORS,
    )
    drop(root, MACHINES[arch])
    uid, gid = USER.split(":")
    (root / "etc/passwd").write_text(f"nobody:x:{uid}:{gid}:nobody:/nonexistent:/bin/false\n")
    (root / "etc/group").write_text(f"nogroup:x:{gid}:\n")
    compile_tree(root, PY)


def wheel_platform(machine: str) -> list[str]:
    """pip's flags for the image's interpreter, CPython VERSION on `machine`, not this one."""
    return [
        "--only-binary=:all:",
        f"--python-version={VERSION}",
        "--implementation=cp",
        f"--platform=manylinux2014_{machine}",
        f"--platform=manylinux_2_28_{machine}",
    ]


def wheels(out: Path, machine: str) -> tuple[list[Path], Path]:
    """(the dependencies' wheels, the package's wheel), for CPython VERSION on `machine`."""
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, SOURCE)
    [ours] = out.glob("kube_scale_exporter-*.whl")
    pip = [sys.executable, "-m", "pip", "download", "-q", *wheel_platform(machine)]
    run(*pip, "--dest", out, ours, CA_WHEEL)
    return sorted(w for w in out.glob("*.whl") if w != ours), ours


def install(root: Path, names: list[Path], machine: str) -> None:
    run(
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        "--no-deps",
        "--no-compile",
        "--root-user-action=ignore",
        *wheel_platform(machine),
        "--target",
        root / SITE,
        *names,
    )
    shutil.rmtree(root / SITE / "bin", ignore_errors=True)
    compile_tree(root, SITE)


def link_ca_bundle(root: Path) -> None:
    for link, target in CA_LINKS.items():
        (root / link).parent.mkdir(parents=True, exist_ok=True)
        (root / link).symlink_to(target)


def added(full: Path, before: set[Path], tree: Path) -> None:
    """Copy into `tree` what `full` holds beyond `before` (its paths, links as links)."""
    for path in sorted(p for p in full.rglob("*") if p not in before):
        dest = tree / path.relative_to(full)
        if path.is_dir() and not path.is_symlink():
            dest.mkdir(parents=True, exist_ok=True)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest, follow_symlinks=False)


def build(out: Path, arch: str) -> list[Path]:
    """OUT/interpreter, OUT/dependencies, OUT/package (made afresh) for `arch`, checked whole."""
    here = "{}.{}".format(*sys.version_info)
    if here != VERSION:  # .pyc files are per minor version: the image's would compile again
        raise SystemExit(f"image tree: this is python {here}, the image's is {VERSION}")
    out = out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    full = out / "full"
    interpreter(full, arch)
    run("cp", "-a", full, out / LAYERS[0])
    machine = MACHINES[arch]
    deps, ours = wheels(out / "wheels", machine)
    for layer, step in (
        (LAYERS[1], lambda: (install(full, deps, machine), link_ca_bundle(full))),
        (LAYERS[2], lambda: install(full, [ours], machine)),
    ):
        before = set(full.rglob("*"))
        step()
        added(full, before, out / layer)
    compiled = bytecode(full)
    chroot_python(full, "-c", CHECK)
    # The interpreter writes a .pyc again where it would not take ours (the image cannot).
    again = sorted(
        str(p.relative_to(full)) for p, t in bytecode(full).items() if compiled.get(p) != t
    )
    if again:
        raise SystemExit(f"image tree: {len(again)} modules compiled again at import: {again[:5]}")
    shutil.rmtree(full)
    shutil.rmtree(out / "wheels")
    return [out / layer for layer in LAYERS]


def main(argv: list[str]) -> int:
    here = next(arch for arch, machine in MACHINES.items() if machine == platform.machine())
    if len(argv) not in (1, 2) or argv[1:] and argv[1] not in MACHINES:
        print(__doc__, file=sys.stderr)
        return 2
    build(Path(argv[0]), argv[1] if argv[1:] else here)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
