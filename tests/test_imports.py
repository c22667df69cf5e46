"""The package's imports run one way: cli -> registry/collectors -> backends; and a node
pod imports only what its collectors need.

The direction is read from the source with `ast` (importing nothing), so a cycle hidden
behind a function-level import is caught too. What a pod imports is read from a real
exporter process, which logs every module it imports (PYTHONPROFILEIMPORTTIME).
"""

import ast
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import requests

from testbed.containerd_server import ContainerdServer
from testbed.exporter import start_exporter
from testbed.kube_apiserver import apiserver_on_new_etcd
from testbed.metrics import parse_exposition, sample, wait_until


PACKAGE = Path(__file__).resolve().parents[1] / "kube_scale_exporter"
NAME = PACKAGE.name
BACKENDS = ("kube", "etcd", "containerd", "netlink")
# module prefix -> prefixes it must never import
FORBIDDEN = {
    **{
        f"{NAME}.{b}": (
            f"{NAME}.collectors",
            f"{NAME}.cli",
            f"{NAME}.registry",
            f"{NAME}.scrape",
            f"{NAME}.check",
            f"{NAME}.web",
        )
        for b in BACKENDS
    },
    f"{NAME}.collectors": (f"{NAME}.cli", f"{NAME}.scrape", f"{NAME}.check", f"{NAME}.web"),
    f"{NAME}.registry": (f"{NAME}.collectors", f"{NAME}.cli", f"{NAME}.scrape"),
    f"{NAME}.scrape": (f"{NAME}.collectors", f"{NAME}.cli", f"{NAME}.kube"),
    f"{NAME}.flagtypes": (f"{NAME}.cli", f"{NAME}.collectors", f"{NAME}.registry"),
    # Metric families are below everything that builds or encodes them.
    f"{NAME}.metrics": tuple(
        f"{NAME}.{m}" for m in ("cli", "registry", "scrape", "collectors", "web", *BACKENDS)
    ),
    f"{NAME}.process": (f"{NAME}.cli", f"{NAME}.collectors", f"{NAME}.scrape", f"{NAME}.web"),
    # The HTTP side (server and routes) knows a scraper's interface, never a collector or
    # a backend.
    f"{NAME}.web": (
        f"{NAME}.cli",
        f"{NAME}.collectors",
        f"{NAME}.registry",
        *(f"{NAME}.{b}" for b in BACKENDS),
    ),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Modules of the package that `path` imports, anywhere in the file."""
    this = module_name(path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.add(target)
            # `from pkg import mod` imports the submodule pkg.mod when there is one.
            found.update(f"{target}.{a.name}" for a in node.names)
    known = {module_name(p) for p in PACKAGE.rglob("*.py")}
    return {m for m in found if m in known and m != this}


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports(p) for p in PACKAGE.rglob("*.py")}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


@pytest.mark.unit
def test_the_package_has_no_import_cycle():
    # A package's __init__ re-exporting its own submodules is not a cycle of concern;
    # drop those edges (parent -> its own child) before looking.
    edges = {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in graph().items()}
    assert cycles(edges) == []


@pytest.mark.unit
@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_imports_run_one_way(layer):
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in graph().items()
        if module == layer or module.startswith(layer + ".")
        for target in targets
        if any(target == f or target.startswith(f + ".") for f in FORBIDDEN[layer])
    )
    assert wrong == []


@pytest.mark.unit
def test_the_web_package_reaches_no_collector_or_backend_even_indirectly():
    edges = graph()
    web = f"{NAME}.web"
    reached, todo = set(), [m for m in edges if m == web or m.startswith(web + ".")]
    while todo:
        for target in edges[todo.pop()] - reached:
            reached.add(target)
            todo.append(target)
    below = (f"{NAME}.collectors", *(f"{NAME}.{b}" for b in BACKENDS))
    assert sorted(m for m in reached if m.startswith(below)) == []


@pytest.mark.unit
def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# What no pod imports: prometheus_client (its package __init__ alone brings the
# rest) and the HTTP servers and client of the standard library it would bring
# (~8 MiB of RSS, bench/results/exposition.md).
NOT_FOR_ANY_POD = ("prometheus_client", "http.server", "urllib.request", "wsgiref")

# What node mode with the neighbor collectors alone has no use for: the API and etcd
# clients' HTTP stack, the YAML readers, containerd's HTTP/2, bcrypt, Decimal quantities
# (~15 MiB of RSS, docs/sizing.md).
NOT_FOR_NEIGHBOR = (
    "requests",
    "urllib3",
    "charset_normalizer",
    "idna",
    "yaml",
    "h2",
    "hpack",
    "bcrypt",
    "decimal",
)


def imported_by_a_scrape(flags, log_dir, auth=None, until=None) -> set[str]:
    """Every module a real exporter imported by the end of its first scrape (the first
    whose text `until(text)` accepts, when given)."""
    exporter = start_exporter(flags, log_dir, env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    try:

        def scraped():
            reply = requests.get(exporter.url + "/metrics", auth=auth, timeout=10)
            reply.raise_for_status()
            return until is None or until(reply.text)

        assert wait_until(scraped, timeout=30)
    finally:
        exporter.proc.stop()
    lines = Path(exporter.proc.log_path).read_text().splitlines()
    # import time:   self [us] | cumulative | imported package
    return {
        line.rsplit("|", 1)[1].strip()
        for line in lines
        if line.startswith("import time:") and line.count("|") == 2
    }


@pytest.mark.integration
def test_node_mode_with_the_neighbor_collectors_imports_only_what_they_need(tmp_path):
    modules = imported_by_a_scrape(
        [
            "--mode=node",
            "--collector.disable-defaults",
            "--collector.neighbor",
            "--collector.neighbor_gc",
        ],
        tmp_path,
    )
    assert "kube_scale_exporter.netlink.neighbor" in modules
    assert sorted(m for m in modules if m.split(".")[0] in NOT_FOR_NEIGHBOR) == []
    assert sorted(unwanted(modules)) == []


def unwanted(modules: set[str]) -> set[str]:
    return {m for m in modules for n in NOT_FOR_ANY_POD if m == n or m.startswith(n + ".")}


@pytest.mark.integration
def test_the_command_line_imports_no_client_library_or_stdlib_http_server():
    """What `import kube_scale_exporter.cli` loads, in a fresh interpreter."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, kube_scale_exporter.cli; print(*sys.modules)"],
        cwd=PACKAGE.parent,  # this tree's package, not an installed one
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert "kube_scale_exporter.cli" in loaded
    assert sorted(unwanted(set(loaded))) == []


# What the default node pod (its pod watch included) has no use for: requests' stack (the
# API client is httpclient.py on the standard library: 6.5 MiB less, docs/sizing.md);
# `platform` and `html` (the Python version is read from sys, the landing page escapes its
# five characters itself: 0.5 MiB less, bench/results/node_memory.md).
NOT_FOR_THE_NODE_POD = ("requests", "urllib3", "charset_normalizer", "idna", "platform", "html")


def pods_watched(families) -> bool:
    try:
        return sample(families, "kubescale_kube_watch_up", resource="pods") == 1
    except KeyError:
        return False


@pytest.mark.integration
def test_the_default_node_pod_with_its_pod_watch_imports_no_requests_stack():
    workdir = Path(tempfile.mkdtemp(prefix="imp-", dir="/tmp"))  # short: unix socket paths
    containerd = ContainerdServer(workdir / "cd").start()
    try:
        with apiserver_on_new_etcd(workdir) as api:
            modules = imported_by_a_scrape(
                [
                    "--mode=node",
                    "--collector.imagepull",
                    f"--containerd.address={containerd.address}",
                    f"--containerd.config={containerd.config}",
                    f"--kube.kubeconfig={api.write_kubeconfig(workdir / 'kubeconfig')}",
                    "--kube.node-name=node-a",
                ],
                workdir,
                until=lambda text: pods_watched(parse_exposition(text)),
            )
    finally:
        containerd.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    assert {"kube_scale_exporter.httpclient", "kube_scale_exporter.kube.client"} <= modules
    assert sorted(m for m in modules if m.split(".")[0] in NOT_FOR_THE_NODE_POD) == []


@pytest.mark.integration
def test_a_web_config_brings_its_readers(tmp_path):
    """The probe sees lazy imports: basic auth in --web.config.file loads yaml and bcrypt."""
    import bcrypt  # noqa: PLC0415  (this test's own hash)

    config = tmp_path / "web.yml"
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()
    config.write_text(f"basic_auth_users:\n  u: {hashed}\n")
    modules = imported_by_a_scrape(
        ["--collector.disable-defaults", "--collector.neighbor", f"--web.config.file={config}"],
        tmp_path,
        auth=("u", "secret"),
    )
    assert {"yaml", "bcrypt"} <= modules
