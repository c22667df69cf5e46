"""python -m fuzz replay [NAME...]            every corpus input once, plain Python (CI)
python -m fuzz run [NAME...] [--seconds S]  atheris, S seconds a harness (FUZZ_SECONDS)
python -m fuzz coverage NAME [DIR...]       lines of the harness' TARGETS its corpus reaches
python -m fuzz report [NAME...]             the last runs and their coverage, as markdown
python -m fuzz keep [NAME...]               add found inputs that reach new lines to a corpus

`run` starts one process per harness, one at a time; each keeps the inputs it finds in
.cache/fuzz/NAME/ (the committed seeds are read, never written) and an input that broke
an invariant in .cache/fuzz/crashes/NAME/. Its log is .cache/fuzz/NAME.log.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

from fuzz import CORPUS, HERE, corpus_files, harness_names

WORK = HERE.parent / ".cache" / "fuzz"
# Each input must finish within this, in replay and under atheris (-timeout): every
# parser here is bounded by its caps, and the largest seed takes well under 0.5 s.
SECONDS_PER_INPUT = 5
# What one input may allocate at its peak in replay (tracemalloc; the parsers' caps are
# a few MiB of text), and the whole fuzzing process' RSS under atheris.
PEAK_BYTES_PER_INPUT = 64 << 20
RSS_LIMIT_MB = 2048
# Inputs the fuzzer makes may grow to this, or to the largest seed if it is larger.
MAX_LEN = 64 << 10
# What `keep` adds to a corpus of the inputs the fuzzer found.
KEEP_BYTES = 24 << 10
DEFAULT_SECONDS = 60
_PROGRESS = re.compile(r"^#\d+\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/", re.M)
_RUNS = re.compile(r"^stat::number_of_executed_units: (\d+)", re.M)


def replay(names: list[str]) -> int:
    passed = failed = 0
    for name in names:
        harness = _prepared(name)
        slowest, peak_most, count = 0.0, 0, 0
        for path in corpus_files(name):
            data = path.read_bytes()
            tracemalloc.start()
            started = time.perf_counter()
            try:
                harness.check(data)
                problem = None
            except Exception as exc:  # noqa: BLE001  (any escape is the finding)
                problem = f"{type(exc).__name__}: {exc}"[:300]
            took = time.perf_counter() - started
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            if problem is None and took > SECONDS_PER_INPUT:
                problem = f"took {took:.1f}s (over {SECONDS_PER_INPUT}s)"
            if problem is None and peak > PEAK_BYTES_PER_INPUT:
                problem = (
                    f"allocated {peak >> 20} MiB at its peak (over {PEAK_BYTES_PER_INPUT >> 20})"
                )
            if problem:
                failed += 1
                print(f"FAIL {path}: {problem}")
            else:
                passed += 1
            slowest, peak_most, count = max(slowest, took), max(peak_most, peak), count + 1
        print(
            f"{name:16} {count:5} inputs  slowest {slowest * 1000:7.1f} ms  "
            f"peak {peak_most / (1 << 20):6.1f} MiB"
        )
    print(f"fuzz-replay: {passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


def _prepared(name: str):
    """The harness module, its optional prepare() run (set-up no input should be timed
    with: certificates, a server)."""
    harness = importlib.import_module(f"fuzz.{name}")
    if hasattr(harness, "prepare"):
        harness.prepare()
    return harness


def run(names: list[str], seconds: int) -> int:
    WORK.mkdir(parents=True, exist_ok=True)
    broken = []
    print(f"{'harness':16} {'runs':>10} {'runs/s':>8} {'cov':>6} {'ft':>7} {'corpus':>8}  result")
    for name in names:
        log = WORK / f"{name}.log"
        with open(log, "w") as out:
            code = subprocess.call(
                [sys.executable, "-m", "fuzz", "_atheris", name, str(seconds)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        text = log.read_text(errors="replace")
        progress, runs = _PROGRESS.findall(text), _RUNS.findall(text)
        cov, ft, corp = progress[-1] if progress else ("?",) * 3
        runs = runs[-1] if runs else "?"
        rate = f"{int(runs) / seconds:.0f}" if runs != "?" else "?"
        result = "ok" if code == 0 else f"BROKEN (exit {code}; see {log})"
        if code:
            broken.append(name)
        print(f"{name:16} {runs:>10} {rate:>8} {cov:>6} {ft:>7} {corp:>8}  {result}")
    if broken:
        print(f"fuzz: invariants broken in {', '.join(broken)}; inputs in {WORK}/crashes/")
    return 1 if broken else 0


def fuzz_one(name: str, seconds: int) -> None:
    """Run one harness under atheris until `seconds` pass or an invariant breaks."""
    import atheris  # noqa: PLC0415  (only `run` needs it; replay runs without)

    module = f"fuzz.{name}"
    spec = importlib.util.find_spec(module)
    text = Path(spec.origin).read_text()
    instrumented = ["kube_scale_exporter", *_literal_tuple(text, "INSTRUMENT")]
    with atheris.instrument_imports(include=instrumented):
        harness = _prepared(name)
    work, crashes = WORK / name, WORK / "crashes" / name
    work.mkdir(parents=True, exist_ok=True)
    crashes.mkdir(parents=True, exist_ok=True)
    seeds = corpus_files(name)
    max_len = max([MAX_LEN, *(p.stat().st_size for p in seeds)])
    argv = [
        sys.argv[0],
        str(work),
        *([str(CORPUS / name)] if seeds else []),
        f"-max_total_time={seconds}",
        f"-timeout={SECONDS_PER_INPUT}",
        f"-rss_limit_mb={RSS_LIMIT_MB}",
        f"-max_len={max_len}",
        # The length limit grows 10x faster than libFuzzer's default (100): depth and
        # size bugs (nesting past the recursion limit, caps) need inputs of 1-4 KiB.
        "-len_control=10",
        f"-artifact_prefix={crashes}/",
        "-print_final_stats=1",
    ]
    atheris.Setup(argv, harness.check)
    atheris.Fuzz()


def _literal_tuple(text: str, name: str) -> list[str]:
    """The strings of `NAME = (...)` in a harness' source, read before it is imported
    (importing it first would import its libraries uninstrumented)."""
    match = re.search(rf"^{name} = \(([^)]*)\)", text, re.M)
    return re.findall(r'"([^"]+)"', match.group(1)) if match else []


class _Tracer:
    """The lines of `files` that each check() runs, and the functions it enters."""

    def __init__(self, harness, files: set[str]):
        self.harness, self.files, self.entered = harness, files, set()

    def run(self, data: bytes, quiet: bool = True, where: object = "") -> set:
        hit = set()

        def local(frame, event, _arg):
            if event == "line":
                hit.add((frame.f_code.co_filename, frame.f_lineno))
            return local

        def tracer(frame, _event, _arg):
            if frame.f_code.co_filename not in self.files:
                return None
            self.entered.add(frame.f_code)
            return local

        sys.settrace(tracer)
        try:
            self.harness.check(data)
        except Exception as exc:  # noqa: BLE001  (reported, the count goes on)
            if not quiet:
                print(f"{where}: {type(exc).__name__}: {exc}"[:200])
        finally:
            sys.settrace(None)
        return hit


def _tracer(name: str) -> _Tracer:
    harness = _prepared(name)
    return _Tracer(harness, {importlib.import_module(m).__file__ for m in harness.TARGETS})


def _reached(name: str, dirs: list[Path], quiet: bool = False) -> dict:
    """Lines of the TARGETS modules that the corpus and DIRs run: out of the lines of the
    functions they enter (how deep they go in what they reach), and out of every function
    of those modules (socket I/O and the like included, which no harness feeds)."""
    tracer = _tracer(name)
    inputs = corpus_files(name) + [p for d in dirs if d.is_dir() for p in sorted(d.iterdir())]
    hit = set()
    for path in inputs:
        hit |= tracer.run(path.read_bytes(), quiet, path)
    files, entered = tracer.files, tracer.entered
    in_entered = {(c.co_filename, line) for c in entered for line in _lines(c)}
    every = {(f, line) for f in files for line in _code_lines(f)}
    return {
        "inputs": len(inputs),
        "functions": len(entered),
        "entered": (len(hit & in_entered), len(in_entered)),
        "modules": (len(hit & every), len(every)),
        "files": {
            f: (len(hit & {x for x in every if x[0] == f}), sum(x[0] == f for x in every))
            for f in sorted(files)
        },
    }


def keep(names: list[str]) -> int:
    """Into each corpus, as found-*: the smallest inputs the runs found (WORK/NAME) that
    run lines the seeds do not, greedily, up to KEEP_BYTES a harness."""
    for name in names:
        folder = CORPUS / name
        for old in folder.glob("found-*"):
            old.unlink()
        tracer = _tracer(name)
        lines = set()
        for path in corpus_files(name):
            lines |= tracer.run(path.read_bytes())
        found = (
            sorted((WORK / name).iterdir(), key=lambda p: (p.stat().st_size, p.name))
            if (WORK / name).is_dir()
            else []
        )
        kept = size = 0
        for path in found:
            data = path.read_bytes()
            if size + len(data) > KEEP_BYTES:
                break
            new = tracer.run(data) - lines
            if new:
                (folder / f"found-{hashlib.sha1(data).hexdigest()[:16]}").write_bytes(data)
                lines |= new
                kept, size = kept + 1, size + len(data)
        print(f"{name:16} kept {kept} of {len(found)} found inputs, {size} bytes")
    return 0


def coverage(name: str, dirs: list[str]) -> int:
    got = _reached(name, [Path(d) for d in dirs])
    for path, (hit, total) in got["files"].items():
        print(f"{os.path.relpath(path):55} {hit:4}/{total:4} lines")
    (hit, total), (all_hit, every) = got["entered"], got["modules"]
    print(
        f"{name}: {got['inputs']} inputs run {hit}/{total} lines of the {got['functions']} "
        f"functions they enter ({100 * hit / total:.0f}%), {all_hit}/{every} of the modules' functions"
    )
    return 0


def report(names: list[str]) -> int:
    """A markdown table of the last `run` of each harness (its log in WORK) and the lines
    its corpus and everything that run found reach."""
    print(
        "| harness | seeds | seconds | runs | runs/s | cov | ft | inputs found | lines reached (functions entered) | lines of the modules | result |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |")
    for name in names:
        log = WORK / f"{name}.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        progress, runs = _PROGRESS.findall(text), _RUNS.findall(text)
        done = re.search(r"Done (\d+) runs in (\d+) second", text)
        cov, ft, _ = progress[-1] if progress else ("?",) * 3
        found = len(list((WORK / name).iterdir())) if (WORK / name).is_dir() else 0
        seconds = done.group(2) if done else "?"
        rate = f"{int(runs[-1]) / int(seconds):.0f}" if runs and done else "?"
        got = _reached(name, [WORK / name], quiet=True)
        (hit, total), (all_hit, every) = got["entered"], got["modules"]
        result = "ok" if done else ("broken: " + (_first_error(text) or "see the log"))
        print(
            f"| {name} | {len(corpus_files(name))} | {seconds} | {runs[-1] if runs else '?'} | {rate} "
            f"| {cov} | {ft} | {found} | {hit}/{total} ({100 * hit / total:.0f}%) of {got['functions']} "
            f"| {all_hit}/{every} | {result} |"
        )
    return 0


def _first_error(text: str) -> str | None:
    match = re.search(r"=== Uncaught Python exception: ===\n([^\n]*)", text)
    return match.group(1)[:80] if match else None


def _lines(code) -> set[int]:
    return {
        line for _, _, line in code.co_lines() if line is not None and line != code.co_firstlineno
    }


def _code_lines(path: str) -> set[int]:
    """Lines holding code inside functions (not the module's top level, run at import)."""
    top = compile(Path(path).read_text(), path, "exec")
    lines, stack = set(), [c for c in top.co_consts if hasattr(c, "co_lines")]
    while stack:
        code = stack.pop()
        if code.co_flags & inspect.CO_OPTIMIZED:  # a function, not a class body
            lines |= _lines(code)
        stack += [c for c in code.co_consts if hasattr(c, "co_lines")]
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("replay")
    p.add_argument("names", nargs="*")
    p = sub.add_parser("run")
    p.add_argument("names", nargs="*")
    p.add_argument(
        "--seconds", type=int, default=int(os.environ.get("FUZZ_SECONDS", DEFAULT_SECONDS))
    )
    p = sub.add_parser("coverage")
    p.add_argument("name")
    p.add_argument("dirs", nargs="*")
    p = sub.add_parser("report")
    p.add_argument("names", nargs="*")
    p = sub.add_parser("keep")
    p.add_argument("names", nargs="*")
    p = sub.add_parser("_atheris")
    p.add_argument("name")
    p.add_argument("seconds", type=int)
    args = parser.parse_args(argv)
    if args.command == "_atheris":
        fuzz_one(args.name, args.seconds)
        return 0
    if args.command == "coverage":
        return coverage(args.name, args.dirs)
    known = harness_names()
    unknown = sorted(set(getattr(args, "names", [])) - set(known))
    if unknown:
        parser.error(f"no harness {', '.join(unknown)} (known: {', '.join(known)})")
    names = args.names or known
    if args.command == "report":
        return report(names)
    if args.command == "keep":
        return keep(names)
    return replay(names) if args.command == "replay" else run(names, args.seconds)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
