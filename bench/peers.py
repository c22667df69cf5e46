"""The libraries the benches measure ours against, each installed once, at an exact
version, with `pip --target` into a directory of its own outside the project's
environment (so the exporter never imports one by accident), and code run in a fresh
interpreter with one of them on its path.
"""

from __future__ import annotations

import ast
import datetime
import inspect
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
import tokenize
from pathlib import Path

from testbed.builds import CACHE

ROOT = Path(__file__).resolve().parent.parent


class Log:
    """A bench's progress lines: each printed as it comes, after the UTC time, and kept for
    the report."""

    def __init__(self):
        self.lines: list[str] = []

    def __call__(self, text: str) -> None:
        line = f"{datetime.datetime.now(datetime.UTC):%H:%M:%S} {text}"
        self.lines.append(line)
        print(line, flush=True)


def install(dist: str, version: str) -> str:
    """The directory holding `dist`==`version` and its dependencies, installed on first use."""
    target = CACHE / f"peer-{dist}-{version}"
    if not _dist_info(target, dist, version):
        partial = target.with_name(target.name + ".new")
        shutil.rmtree(partial, ignore_errors=True)  # what a failed install left
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--upgrade", "--target", str(partial)]
            + [f"{dist}=={version}"],
            check=True,
        )
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    return str(target)


def ours() -> str:
    """This side's version: the package's, and the commit of the tree measured."""
    from kube_scale_exporter import __version__  # noqa: PLC0415

    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    # What a bench runs: not the docs, nor the results the benches write.
    code = ["kube_scale_exporter", "bench", "testbed", ":(exclude)bench/results"]
    dirty = (
        subprocess.run(["git", "diff", "--quiet", "HEAD", "--", *code], cwd=ROOT).returncode != 0
    )
    return (
        f"kube-scale-exporter {__version__} at {head or 'no commit'}{' (changed)' if dirty else ''}"
    )


def versions(target: str) -> dict[str, str]:
    """Every distribution installed in `target`: name -> version."""
    found = {}
    for info in Path(target).glob("*.dist-info"):
        name, _, version = info.name.removesuffix(".dist-info").rpartition("-")
        found[name.lower().replace("_", "-")] = version
    return dict(sorted(found.items()))


def _dist_info(target: Path, dist: str, version: str) -> bool:
    names = {f"{dist}-{version}.dist-info", f"{dist.replace('-', '_')}-{version}.dist-info"}
    return target.is_dir() and any((target / name).is_dir() for name in names)


def run(code: str, cfg: dict, *paths: str, timeout: float = 900, prefix=()) -> dict:
    """Run `code` in a fresh interpreter with argv[1] = cfg as JSON and `paths` (then this
    tree) first on its path, under the command `prefix` if any (`ip netns exec NAME`);
    returns the JSON it printed last."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*paths, str(ROOT)]))
    env.pop("REQUESTS_CA_BUNDLE", None)  # a peer would trust it over the kubeconfig's CA
    out = subprocess.run(
        [*prefix, sys.executable, "-c", code, json.dumps(cfg)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(path: Path, lines: list[str]) -> None:
    """A bench's report: printed, and written to its file in bench/results."""
    text = "\n".join(lines) + "\n"
    print(text)
    path.write_text(text)


def code_lines(obj) -> int:
    """Lines of code of a module, class or function: lines with a token that is not a
    comment, less its docstrings."""
    source = textwrap.dedent(inspect.getsource(obj))
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                docstrings.update(range(body[0].lineno, body[0].end_lineno + 1))
    code = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in skip and tok.type != tokenize.ENDMARKER:
            code.update(range(tok.start[0], tok.end[0] + 1))
    return len(code - docstrings)


# Defines rss_mib() and peak_mib(): the process' resident memory now and at most, for
# code given to run(). From /proc (VmRSS, VmHWM): getrusage's ru_maxrss would carry the
# parent's peak across fork and exec.
RSS_MIB = r"""
def _status_mib(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
def rss_mib():
    return _status_mib("VmRSS")
def peak_mib():
    return _status_mib("VmHWM")
"""
