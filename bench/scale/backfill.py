"""Put synthesized history and the mixin's recorded series into a TSDB with promtool.

Raw series: `promtool tsdb create-blocks-from openmetrics`. Recorded series: `promtool tsdb
create-blocks-from rules` against a Prometheus serving those blocks. promtool evaluates
each rule against the server as it is, so a rule that reads another recording rule needs
that rule's blocks loaded first: the rules are backfilled in passes by dependency depth,
restarting the server on the grown TSDB between passes.

promtool cuts [start, end] at its 2 h block boundaries and evaluates each group at its own
times (start aligned up to the group's offset, a hash of its name and file, within one
interval). A cut with no such time before the cut ends makes it stop the rule altogether
(`break`, not `continue`, in cmd/promtool/rules.go): the whole range goes unrecorded. Only
the first cut can be that short, so the backfill starts where it holds a full interval
(rules_start).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import yaml

from bench.scale.prom import SCRAPE_INTERVAL, Prometheus, binaries
from bench.scale.queries import rule_dependencies


def _move_blocks(src: Path, dst: Path) -> int:
    moved = 0
    for block in sorted(src.iterdir()):
        if (block / "meta.json").exists():
            shutil.move(str(block), dst / block.name)
            moved += 1
    return moved


def openmetrics(om_path: Path, data_dir: Path, max_block: str = "24h") -> float:
    """Backfill the raw series; returns seconds promtool took."""
    data_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    result = subprocess.run(
        [
            binaries()[1],
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "-q",
            f"--max-block-duration={max_block}",
            str(om_path),
            str(data_dir),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"promtool openmetrics backfill failed:\n{result.stderr[-3000:]}")
    return time.monotonic() - start


# The span of the blocks promtool's rule backfill writes (its hidden --max-block-duration,
# 2 h unless set larger), so the boundaries its cuts fall on.
RULES_BLOCK_SECONDS = 2 * 3600


def rules_start(start: int, interval: int = SCRAPE_INTERVAL) -> int:
    """Where the rules' backfill starts so every group is evaluated in promtool's first cut.

    The first cut runs from `start` to a second before the next block boundary; a group's
    first evaluation falls up to an interval after `start` (its offset, in nanoseconds). When
    the boundary is an interval or less away, the cut may end before that evaluation and
    promtool then records nothing of the group's rules over the whole range (a realistic
    7,500-node run began 30 s before a boundary and lost imagepull.rules' four records).
    Starting an interval earlier leaves the cut longer than an interval; `start` is the
    first segment's, so the evaluations before it find no history and record nothing."""
    to_boundary = -start % RULES_BLOCK_SECONDS
    return start - interval if 0 < to_boundary <= interval else start


def recording_rules(
    groups: list[dict], data_dir: Path, workdir: Path, start: int, end: int
) -> list[dict]:
    """Backfill every recording rule over [start, end] in dependency passes."""
    start = rules_start(start)
    depth = rule_dependencies(groups)
    passes = []
    for level in range(max(depth.values(), default=-1) + 1):
        pass_groups = []
        for g in groups:
            rules = [r for r in g["rules"] if "record" in r and depth[r["record"]] == level]
            if rules:
                pass_groups.append(
                    {"name": g["name"], "interval": f"{SCRAPE_INTERVAL}s", "rules": rules}
                )
        rules_path = workdir / f"rules-pass{level}.yaml"
        rules_path.write_text(yaml.safe_dump({"groups": pass_groups}, sort_keys=False))
        out = workdir / f"rules-pass{level}-blocks"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        began = time.monotonic()
        with Prometheus(workdir, data_dir) as prom:
            result = subprocess.run(
                [
                    binaries()[1],
                    "tsdb",
                    "create-blocks-from",
                    "rules",
                    "-q",
                    f"--url={prom.url}",
                    f"--start={start}",
                    f"--end={end}",
                    f"--eval-interval={SCRAPE_INTERVAL}s",
                    f"--output-dir={out}",
                    str(rules_path),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
        if result.returncode != 0:
            raise RuntimeError(
                f"promtool rules backfill (pass {level}) failed:\n{result.stderr[-3000:]}"
            )
        blocks = _move_blocks(out, data_dir)
        passes.append(
            {
                "pass": level,
                "rules": sum(len(g["rules"]) for g in pass_groups),
                "blocks": blocks,
                "seconds": time.monotonic() - began,
            }
        )
        shutil.rmtree(out, ignore_errors=True)
    return passes
