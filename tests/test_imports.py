"""The package's imports run one way: cli -> registry/collectors -> backends.

Read from the source with `ast` (importing nothing), so a cycle hidden behind a
function-level import is caught too.
"""

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

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


def test_the_package_has_no_import_cycle():
    # A package's __init__ re-exporting its own submodules is not a cycle of concern;
    # drop those edges (parent -> its own child) before looking.
    edges = {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in graph().items()}
    assert cycles(edges) == []


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


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
