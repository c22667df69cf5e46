"""Runs .ci/setup.d's steps, JOBS at a time (KSE_SETUP_JOBS, default 2), each after the steps
its `# needs: NN-NAME ...` header line names; a step naming none waits for 10-base only (it
installs the package and the Debian tools every step may use). Most steps are Go builds whose
module downloads and links leave a core idle, so two at once finish sooner on two cores than
one after the other.

Each step's output goes to a log, printed whole when the step ends, under the step's name and
time, so that two steps' lines never interleave. A failing step stops new ones from starting;
the running ones finish, and the exit status is 1.

    python3 .ci/setup.py [STEP...]   (default: every .ci/setup.d/*.sh)
"""

import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

STEPS = pathlib.Path(__file__).resolve().parent / "setup.d"
BASE = "10-base"
NEEDS = re.compile(r"^# needs: (.+)$", re.M)


def needs(step: pathlib.Path) -> set[str]:
    if step.stem == BASE:
        return set()
    found = NEEDS.search(step.read_text())
    return {BASE, *(found[1].split() if found else ())}


def run(steps: list[pathlib.Path], jobs: int, logs: pathlib.Path) -> int:
    known = {p.stem for p in STEPS.glob("*.sh")}
    for step in steps:
        if needs(step) - known:
            print(
                f"setup: {step.stem} needs {sorted(needs(step) - known)}: no such step",
                file=sys.stderr,
            )
            return 2
    names = {s.stem for s in steps}
    wanted = {s.stem: needs(s) & names for s in steps}
    pending = list(steps)
    running: dict[str, tuple[subprocess.Popen, float, pathlib.Path]] = {}
    done: set[str] = set()
    failed: list[str] = []
    started = time.monotonic()
    while pending or running:
        while not failed and len(running) < jobs:
            ready = [s for s in pending if wanted[s.stem] <= done]
            if not ready:
                break
            step = ready[0]
            pending.remove(step)
            log = logs / f"{step.stem}.log"
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    ["bash", str(step)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=STEPS.parent.parent,
                )
            running[step.stem] = (proc, time.monotonic(), log)
            print(f"::: .ci/setup.d/{step.name} started", flush=True)
        if not running:
            break  # failed, or a cycle: nothing can start
        pid, status = os.wait()
        name = next((n for n, (p, _, _) in running.items() if p.pid == pid), None)
        if name is None:
            continue
        proc, began, log = running.pop(name)
        rc = os.waitstatus_to_exitcode(status)
        proc.returncode = rc
        took = time.monotonic() - began
        sys.stdout.write(log.read_text(errors="replace"))
        if rc:
            failed.append(name)
            print(f"::: .ci/setup.d/{name}.sh FAILED ({rc}) after {took:.0f}s", flush=True)
        else:
            done.add(name)
            print(f"::: .ci/setup.d/{name}.sh done in {took:.0f}s", flush=True)
    left = [s.stem for s in pending]
    if left and not failed:
        print(f"setup: {left} wait for each other (a cycle in # needs)", file=sys.stderr)
        return 1
    print(f"::: setup: {len(done)} steps in {time.monotonic() - started:.0f}s, {jobs} at a time")
    if failed:
        print(f"setup: failed: {failed}; not started: {left}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    steps = [STEPS / f"{a}.sh" for a in argv] if argv else sorted(STEPS.glob("*.sh"))
    missing = [str(s) for s in steps if not s.is_file()]
    if missing:
        print(f"setup: no such step: {missing}", file=sys.stderr)
        return 2
    try:
        jobs = int(os.environ.get("KSE_SETUP_JOBS", "2"))
        if jobs < 1:
            raise ValueError
    except ValueError:
        print("setup: KSE_SETUP_JOBS must be a whole number of 1 or more", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="kse-setup.") as logs:
        return run(steps, jobs, pathlib.Path(logs))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
