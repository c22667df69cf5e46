"""The command line both generators share: write what changed, or check and name every
committed file that drifted."""

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def differing(files: dict[Path, str], source: str, root: Path = REPO) -> list[str]:
    """Each generated file that is missing or differs from what `source` renders, named
    relative to `root`."""
    problems = []
    for path, content in files.items():
        if not path.exists():
            problems.append(f"{path.relative_to(root)}: missing")
        elif path.read_text() != content:
            problems.append(f"{path.relative_to(root)}: differs from {source}")
    return problems


def main(
    description: str,
    render: Callable[[], dict[Path, str]],
    drift: Callable[[dict[Path, str]], list[str]],
    argv=None,
) -> int:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    files = render()
    if args.check:
        problems = drift(files)
        for p in problems:
            print(p, file=sys.stderr)
        if problems:
            print("generated files drifted: run `make generate` and commit", file=sys.stderr)
        return 1 if problems else 0
    for path, content in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != content:
            path.write_text(content)
            print(f"wrote {path.relative_to(REPO)}")
    return 0
