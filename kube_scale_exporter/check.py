"""`kube-scale-exporter check`: run the enabled collectors once and tell a person what to do.

Exit status: 0 when nothing needs changing, 1 when a collector failed or found something
to change (each with the concrete change, e.g. the sysctl lines to set).
"""
from __future__ import annotations

from typing import TextIO

from kube_scale_exporter.registry import Collector, Finding
from kube_scale_exporter.scrape import Scraper

LABELS = {"info": "", "warning": "WARNING", "critical": "CRITICAL"}


def run_check(collectors: list[Collector], timeout: float, out: TextIO) -> int:
    scraper = Scraper(collectors)
    try:
        families = scraper.scrape(timeout)
        success = next(f for f in families if f.name == "kubescale_scrape_collector_success")
        ok = {s.labels["collector"]: s.value == 1.0 for s in success.samples}
        failed = 0
        actionable = 0
        if not collectors:
            out.write("No collector is enabled for these flags.\n")
        for c in collectors:
            out.write(f"[{c.name}]\n")
            if not ok[c.name]:
                failed += 1
                error = scraper.last_error(c.name) or "unknown error"
                out.write(f"  {'FAILED':<8} the collector failed: {error}\n")
                continue
            findings: list[Finding] = c.findings()
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
