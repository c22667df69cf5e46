"""The CPU one part of a Go server's code used over a window, from the server's own profiles.

A CPU profile (net/http/pprof's /debug/pprof/profile) puts each 10 ms sample on the stack
that ran it, so the part's CPU is the samples whose stack holds one of its functions. The
exception is the garbage collector's background mark workers, which run on stacks of their
own: their CPU is shared out by allocation, the part's share of the bytes allocated over
the same window (an allocs profile of the same seconds, taken alongside). GC assists run
on the allocating goroutine's stack and are counted with it already.

Profiles are read with `go tool pprof -raw` (Go is on every machine that runs the tests).
"""

from __future__ import annotations

import concurrent.futures
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

import requests

GC_WORKER = "runtime.gcBgMarkWorker"


@dataclass
class Share:
    seconds: float  # the profiles' window
    cpu: float  # CPU seconds sampled in the whole process
    part: float  # ... on stacks holding one of the part's functions
    gc_background: float  # ... on the GC's background mark workers
    alloc_fraction: float  # the part's share of the bytes allocated in the window

    @property
    def attributed(self) -> float:
        """The part's CPU seconds with its share of the background GC."""
        return self.part + self.gc_background * self.alloc_fraction

    def as_dict(self) -> dict:
        return {**asdict(self), "attributed": self.attributed}


def fetch(base_url: str, seconds: int, directory: Path) -> tuple[Path, Path]:
    """A CPU and an allocs profile over the same `seconds`, requested together."""
    directory.mkdir(parents=True, exist_ok=True)

    def get(kind: str) -> Path:
        reply = requests.get(
            f"{base_url}/debug/pprof/{kind}", params={"seconds": seconds}, timeout=seconds + 60
        )
        reply.raise_for_status()
        path = directory / f"{kind}.pb.gz"
        path.write_bytes(reply.content)
        return path

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        cpu, allocs = pool.map(get, ("profile", "allocs"))
    return cpu, allocs


def samples(path: Path) -> tuple[list[str], list[tuple[list[int], set[str]]]]:
    """(value names, [(values, function names on the stack)])."""
    go = shutil.which("go")
    if go is None:
        raise FileNotFoundError("go is needed to read profiles (go tool pprof)")
    text = subprocess.run(
        [go, "tool", "pprof", "-raw", str(path)], capture_output=True, text=True, check=True
    ).stdout
    lines = text.splitlines()
    start = lines.index("Samples:")
    names = lines[start + 1].split()
    stacks: list[tuple[list[int], list[int]]] = []
    i = start + 2
    while lines[i] != "Locations":
        head, _, ids = lines[i].partition(":")
        if re.fullmatch(r"[\s\d-]+", head) and head.split():  # not a label line (bytes:[160])
            stacks.append(([int(v) for v in head.split()], [int(x) for x in ids.split()]))
        i += 1
    functions: dict[int, set[str]] = {}
    current = None
    for ln in lines[i + 1 :]:
        if not ln.strip() or not ln.startswith(" "):
            break  # Mappings, or the end
        m = re.match(r"\s+(\d+): 0x[0-9a-f]+ M=\d+ (\S+)", ln)
        if m:
            current = functions.setdefault(int(m.group(1)), set())
            current.add(m.group(2))
        elif current is not None:  # a function inlined at the same location
            current.add(ln.split()[0])
    return (
        names,
        [(values, set().union(*(functions.get(x, set()) for x in ids))) for values, ids in stacks],
    )


def within(cpu_profile: Path, part: re.Pattern, inner: dict[str, re.Pattern]) -> dict[str, float]:
    """CPU seconds on stacks holding both one of `part`'s functions and one of each inner
    pattern's: where the part's own time went (background GC not included)."""
    names, cpu_samples = samples(cpu_profile)
    ns = _column(names, "cpu/")
    mine = [(v[ns], fs) for v, fs in cpu_samples if any(part.search(f) for f in fs)]
    return {
        name: sum(v for v, fs in mine if any(pattern.search(f) for f in fs)) / 1e9
        for name, pattern in inner.items()
    }


def _column(names: list[str], prefix: str) -> int:
    return next(i for i, n in enumerate(names) if n.startswith(prefix))


def share(cpu_profile: Path, allocs_profile: Path, part: re.Pattern, seconds: float) -> Share:
    """The CPU of the functions `part` matches (with their share of the background GC), in
    profiles of the same `seconds`."""
    names, cpu_samples = samples(cpu_profile)
    ns = _column(names, "cpu/")
    total = sum(v[ns] for v, _ in cpu_samples)
    mine = sum(v[ns] for v, fs in cpu_samples if any(part.search(f) for f in fs))
    gc = sum(v[ns] for v, fs in cpu_samples if GC_WORKER in fs)
    names, alloc_samples = samples(allocs_profile)
    space = _column(names, "alloc_space/")
    allocated = sum(v[space] for v, _ in alloc_samples)
    allocated_by_part = sum(v[space] for v, fs in alloc_samples if any(part.search(f) for f in fs))
    return Share(
        seconds,
        total / 1e9,
        mine / 1e9,
        gc / 1e9,
        allocated_by_part / allocated if allocated else 0.0,
    )
