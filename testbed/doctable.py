"""A Markdown table in a doc between `<!-- NAME:begin -->` and `<!-- NAME:end -->`, whose
rows tests write from what they measured (KSE_UPDATE_DOCS=1) and otherwise check."""

from __future__ import annotations

import fcntl
from collections.abc import Callable, Sequence
from pathlib import Path


class DocTable:
    def __init__(self, doc: Path, name: str, key: Callable[[str], object]):
        self.doc = doc
        self.begin, self.end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        self.key = key

    def rows(self) -> dict:
        """{key: row} under the header and its rule, in the doc's order; {} without markers."""
        text = self.doc.read_text()
        if self.begin not in text:
            return {}
        body = text[text.index(self.begin) + len(self.begin) : text.index(self.end)]
        return {self.key(row): row for row in body.strip("\n").splitlines()[2:]}

    def put(self, row: str, order: Sequence | None = None) -> None:
        """`row` in place of the row of its key (appended where there is none; sorted by
        `order`'s keys when given), under a lock: xdist workers write rows at once."""
        with open(self.doc, "r+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            text = f.read()
            head, rest = text.split(self.begin)
            body, tail = rest.split(self.end)
            lines = [ln for ln in body.strip("\n").splitlines() if ln]
            header, rows = lines[:2], lines[2:]
            keys = [self.key(ln) for ln in rows]
            if self.key(row) in keys:
                rows[keys.index(self.key(row))] = row
            else:
                rows.append(row)
            if order is not None:
                rank = {k: i for i, k in enumerate(order)}
                rows.sort(key=lambda ln: rank.get(self.key(ln), len(rank)))
            f.seek(0)
            f.write(head + self.begin + "\n" + "\n".join(header + rows) + "\n" + self.end + tail)
            f.truncate()
