"""The Dockerfile, checked without a container engine.

Its instructions are read, and its two RUN steps are executed here as written: the
build stage's `pip wheel` in a context made only of what its COPY lines copy, then the
final stage's offline install into a fresh venv. The result must be the very wheel a
build from the repository gives, and the ENTRYPOINT must serve as the numeric USER, with
no capability and nothing in the install tree writable by it, the neighbor collectors
included.
"""

import csv
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile

import pytest
import requests

from kube_scale_exporter import __version__
from kube_scale_exporter.cli import DEFAULT_PORT
from testbed.ports import free_port
from testbed.metrics import wait_until
from testbed.procs import listening_ports

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The image's Python lives in world-readable /usr/local; the test's own (pyenv, below
# /root) is unreadable to the image's USER, so the final stage runs on Debian's 3.11.
SYSTEM_PYTHON = "/usr/bin/python3.11"


def instructions(path):
    """(INSTRUCTION, argument text) pairs, with continuations joined and comments dropped."""
    out, pending = [], ""
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            full = pending + line
            pending = ""
            word, _, rest = full.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages(path):
    """Instructions grouped by FROM; global ARGs come first under the name None."""
    groups = [[None, []]]
    for word, rest in instructions(path):
        if word == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            groups.append([name, [(word, rest)]])
        else:
            groups[-1][1].append((word, rest))
    return groups


def args_defaults(steps):
    return dict(rest.split("=", 1) for word, rest in steps if word == "ARG" and "=" in rest)


def run_commands(rest):
    """A RUN's shell commands split at &&, with --mount options removed."""
    words = [w for w in shlex.split(rest) if not w.startswith("--mount=")]
    commands, current = [], []
    for w in words:
        if w == "&&":
            commands.append(current)
            current = []
        else:
            current.append(w)
    return commands + [current]


def localise(argv, python, wheels):
    return [python if w == "python" else w.replace("/wheels", wheels) for w in argv]


@pytest.fixture(scope="module")
def dockerfile():
    return stages(os.path.join(REPO, "Dockerfile"))


@pytest.fixture(scope="module")
def world():
    """A directory every user may read, so the image's USER can run what is built there."""
    root = tempfile.mkdtemp(prefix="kse-image-")
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def built(dockerfile, world):
    """Run the build stage: COPY into a context, then its RUN with /wheels made local."""
    name, steps = dockerfile[1]
    assert name == "build"
    src, wheels = os.path.join(world, "src"), os.path.join(world, "wheels")
    os.makedirs(src)
    for word, rest in steps:
        if word == "COPY":
            *sources, dest = rest.split()
            for source in sources:
                target = (
                    os.path.join(src, dest, os.path.basename(source))
                    if dest.endswith("/")
                    else os.path.join(src, dest)
                )
                if os.path.isdir(os.path.join(REPO, source)):
                    shutil.copytree(
                        os.path.join(REPO, source),
                        target,
                        ignore=shutil.ignore_patterns("__pycache__"),
                    )
                else:
                    shutil.copy(os.path.join(REPO, source), target)
        elif word == "RUN":
            for argv in run_commands(rest):
                subprocess.run(
                    localise(argv, sys.executable, wheels),
                    cwd=src,
                    check=True,
                    capture_output=True,
                    timeout=300,
                )
    return wheels


def record(wheel):
    """{path: sha256} of a wheel, from its RECORD."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        rows = csv.reader(io.StringIO(z.read(name).decode()))
        return {path: digest for path, digest, _size in rows if digest}


def own_wheel(directory):
    [wheel] = [f for f in os.listdir(directory) if f.startswith("kube_scale_exporter-")]
    return os.path.join(directory, wheel)


@pytest.mark.unit
def test_stages_base_and_final_image_settings(dockerfile):
    assert [name for name, _ in dockerfile] == [None, "build", None]
    base = args_defaults(dockerfile[0][1])["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11-slim-bookworm", base)  # the Python CI tests with
    final = dict(dockerfile[2][1])
    user = final["USER"]
    assert re.fullmatch(r"[1-9][0-9]*:[1-9][0-9]*", user), "numeric, non-root user and group"
    assert final["EXPOSE"] == str(DEFAULT_PORT)
    assert json.loads(final["ENTRYPOINT"]) == ["kube-scale-exporter"]  # exec form: flags pass
    assert "CMD" not in final
    assert args_defaults(dockerfile[2][1])["VERSION"] == __version__
    labels = dict(re.findall(r'(org\.opencontainers\.image\.[a-z.]+)="([^"]*)"', final["LABEL"]))
    for key in ("title", "description", "version", "licenses", "base.name"):
        assert labels[f"org.opencontainers.image.{key}"], key
    assert "PYTHONDONTWRITEBYTECODE=1" in final["ENV"]


@pytest.mark.unit
def test_the_context_holds_what_the_build_copies(dockerfile):
    ignore = open(os.path.join(REPO, ".dockerignore")).read().split()
    kept = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied = {src for word, rest in dockerfile[1][1] if word == "COPY" for src in rest.split()[:-1]}
    assert copied == kept


@pytest.mark.integration
def test_the_image_wheel_is_the_wheel_the_repository_builds(built, world):
    # From the committed files, as a fresh clone in CI has them (a build in the work tree
    # would also leave build/ behind, whose stale copies can end up in later wheels).
    checkout = os.path.join(world, "checkout")
    tracked = (
        subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True)
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, tracked):
        if os.path.isfile(os.path.join(REPO, rel)):
            os.makedirs(os.path.join(checkout, os.path.dirname(rel)), exist_ok=True)
            shutil.copy(os.path.join(REPO, rel), os.path.join(checkout, rel))
    ci = os.path.join(world, "ci-wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-cache-dir",
            "--wheel-dir",
            ci,
            checkout,
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    from_image, from_repo = own_wheel(built), own_wheel(ci)
    assert os.path.basename(from_image) == f"kube_scale_exporter-{__version__}-py3-none-any.whl"
    assert record(from_image) == record(from_repo)
    assert any(p == "kube_scale_exporter/web/config.py" for p in record(from_image))


@pytest.mark.integration
def test_the_final_stage_installs_offline_and_serves_as_its_user(dockerfile, built, world):
    venv = os.path.join(world, "venv")
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", venv], check=True, timeout=120)
    python = os.path.join(venv, "bin", "python")
    final = dockerfile[2][1]
    [install] = [rest for word, rest in final if word == "RUN"]
    for argv in run_commands(install):
        subprocess.run(localise(argv, python, built), check=True, capture_output=True, timeout=300)
    assert not os.path.exists(os.path.join(venv, "bin", "pip")), "pip is removed"
    entrypoint = json.loads(dict(final)["ENTRYPOINT"])
    command = [os.path.join(venv, "bin", entrypoint[0]), *entrypoint[1:]]
    env = {"PATH": os.path.join(venv, "bin") + ":/usr/bin:/bin"}
    env.update(kv.split("=", 1) for kv in dict(final)["ENV"].split())
    uid, gid = (int(x) for x in dict(final)["USER"].split(":"))

    version = subprocess.run(
        [*command, "--version"],
        cwd="/",
        env=env,
        user=uid,
        group=gid,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert version.stdout.strip() == f"kube-scale-exporter {__version__}", version

    before = sorted(os.walk(venv))
    port = free_port()
    # The node pod's collectors that need no mount, as the image's user: setuid from root
    # empties the capability sets, as the pod's `drop: [ALL]` does.
    proc = subprocess.Popen(
        [
            *command,
            "--mode=node",
            "--collector.disable-defaults",
            "--collector.neighbor",
            "--collector.neighbor_gc",
            "--web.listen-address",
            f"127.0.0.1:{port}",
        ],
        cwd="/",
        env=env,
        user=uid,
        group=gid,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        # Its own listener, not whatever took the port meanwhile: then it failed.
        assert wait_until(lambda: port in listening_ports(proc.pid), 30), f"not listening on {port}"
        with open(f"/proc/{proc.pid}/status") as f:
            status = dict(line.split(":", 1) for line in f)
        assert int(status["CapEff"], 16) == 0 and status["Uid"].split()[0] == str(uid)
        r = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert r.status_code == 200 and "kubescale_build_info{" in r.text
        for collector in ("neighbor", "neighbor_gc"):
            assert f'kubescale_scrape_collector_success{{collector="{collector}"}} 1.0' in r.text
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert sorted(os.walk(venv)) == before, "nothing is written below the install tree"
