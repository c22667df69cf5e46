"""`kube-scale-exporter check`: run the enabled collectors once and tell a person what to do.

Exit status: 0 when nothing needs changing, 1 when a collector failed or found something
to change (each with the concrete change, e.g. the sysctl lines to set).
"""

from __future__ import annotations

from typing import TextIO

from kube_scale_exporter.registry import Collector
from kube_scale_exporter.scrape import Scraper

LABELS = {"info": "", "warning": "WARNING", "critical": "CRITICAL"}


def run_check(collectors: list[Collector], timeout: float, out: TextIO) -> int:
    scraper = Scraper(collectors)
    try:
        for c in collectors:
            c.wait_ready()
        result = scraper.scrape(timeout)
        by_name = {c.name: c for c in collectors}
        failed = actionable = 0
        if not collectors:
            out.write("No collector is enabled for these flags.\n")
        for outcome in result.outcomes:
            out.write(f"[{outcome.name}]\n")
            if not outcome.ok:
                failed += 1
                out.write(f"  {'FAILED':<8} the collector failed: {outcome.error}\n")
                continue
            findings = by_name[outcome.name].advise(result.states[outcome.name])
            if not findings:
                out.write(f"  {'':<8} nothing to report\n")
            for f in findings:
                actionable += f.actionable
                out.write(f"  {LABELS.get(f.severity, ''):<8} {f.summary}\n")
                for line in f.advice.splitlines():
                    out.write(f"  {'':<8}   {line}\n")
        out.write(f"\n{actionable} finding(s) to act on, {failed} collector(s) failed.\n")
        return 1 if actionable or failed else 0
    finally:
        scraper.close()
