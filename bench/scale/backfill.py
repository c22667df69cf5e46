"""Put synthesized history and the mixin's recorded series into a TSDB with promtool.

Raw series: `promtool tsdb create-blocks-from openmetrics`. Recorded series: `promtool tsdb
create-blocks-from rules` against a Prometheus serving those blocks. promtool evaluates
each rule against the server as it is, so a rule that reads another recording rule needs
that rule's blocks loaded first: the rules are backfilled in passes by dependency depth,
restarting the server on the grown TSDB between passes.
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


def recording_rules(
    groups: list[dict], data_dir: Path, workdir: Path, start: int, end: int
) -> list[dict]:
    """Backfill every recording rule over [start, end] in dependency passes."""
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
