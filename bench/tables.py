"""Markdown tables: building, number formatting and parsing back (the test reads the report)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

NOT_AVAILABLE = "not available"
FAILED = "failed"


def fmt(x: float | int | None, digits: int = 4) -> str:
    """A number with `digits` significant digits (plain notation), '' for None."""
    if x is None:
        return ""
    if isinstance(x, int):
        return str(x)
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    mag = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - mag)
    return f"{x:.{decimals}f}"


def not_available(reason: str) -> str:
    return f"{NOT_AVAILABLE}: {reason}"


def failed(reason: str) -> str:
    return f"{FAILED}: {reason}"


def unmeasured(cell: str) -> bool:
    """A cell that stands in for a measurement: skipped with a reason, or failed."""
    return cell.startswith((NOT_AVAILABLE + ":", FAILED + ":"))


@dataclass
class Table:
    key: str                      # "selection", "compress", ...: stable id for tests
    title: str                    # the section heading
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)      # printed under the table
    records: list[dict] = field(default_factory=list)   # the rows unformatted, for --json

    def add(self, *cells: object) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{self.key}: row of {len(cells)} cells for {len(self.columns)} columns")
        self.rows.append([c if isinstance(c, str) else fmt(c) for c in cells])
        self.records.append(dict(zip(self.columns, cells)))

    def skip(self, label_cells: list[str], reason: str) -> None:
        """A row that cannot be measured here: the labels, then the reason, then blanks."""
        self.unmeasured(label_cells, not_available(reason))

    def unmeasured(self, label_cells: list[str], cell: str) -> None:
        """A row without numbers: the labels, then `cell` (see not_available / failed)."""
        rest = len(self.columns) - len(label_cells)
        self.rows.append(list(label_cells) + [cell] + [""] * (rest - 1))
        self.records.append({**dict(zip(self.columns, label_cells)), "status": cell})

    def to_markdown(self) -> str:
        out = [f"## {self.title}", "", "| " + " | ".join(self.columns) + " |",
               "|" + "|".join("---" for _ in self.columns) + "|"]
        out += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in self.rows]
        if self.notes:
            out.append("")
            out += [f"- {n}" for n in self.notes]
        return "\n".join(out) + "\n"


_ROW = re.compile(r"^\|(.*)\|\s*$")


def parse_markdown_tables(text: str) -> dict[str, list[dict[str, str]]]:
    """{section heading: rows as {column: cell}} for every table under a '## ' heading."""
    result: dict[str, list[dict[str, str]]] = {}
    heading, header, rows = None, None, None
    for line in text.splitlines():
        if line.startswith("## "):
            heading, header, rows = line[3:].strip(), None, None
            continue
        m = _ROW.match(line)
        if not m or heading is None:
            header = None if not m else header
            continue
        cells = [c.strip() for c in m.group(1).split("|")]
        if header is None:
            header, rows = cells, []
            result[heading] = rows
        elif all(set(c) <= set("-: ") and c for c in cells):
            continue                                      # the |---| separator
        else:
            rows.append(dict(zip(header, cells)))
    return result
