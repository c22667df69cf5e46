"""docs/development.md's tree is the tree: every path it names exists, and it leaves out
no module of the package and no top-level folder of the repository."""

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "kube_scale_exporter"


def documented_paths() -> set[str]:
    text = (REPO / "docs" / "development.md").read_text()
    block = re.search(r"## Layout\n.*?```\n(.*?)```", text, re.S).group(1)
    paths, stack = set(), []
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        if not line.strip() or indent >= 20:  # a description carried to the next line
            continue
        depth = indent // 2
        name = line.split()[0]
        stack[depth:] = [name]
        paths.add("".join(stack))
    return paths


@pytest.mark.unit
def test_every_documented_path_exists():
    missing = sorted(p for p in documented_paths() if not (REPO / p).exists())
    assert missing == []


@pytest.mark.unit
def test_every_module_of_the_package_is_documented():
    documented = documented_paths()
    modules = {
        str(p.relative_to(REPO))
        for p in (REPO / PACKAGE).rglob("*.py")
        if p.name != "__init__.py" or p.parent.name == "collectors"
    }
    packages = {
        str(p.parent.relative_to(REPO)) + "/" for p in (REPO / PACKAGE).rglob("__init__.py")
    }
    assert sorted((modules | packages) - documented) == []


@pytest.mark.integration
def test_every_top_level_folder_is_documented():
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    folders = {path.split("/")[0] + "/" for path in tracked if "/" in path}
    assert sorted(folders - documented_paths()) == []
