"""Benchmarks as data: every measured row as JSON, and a regression check between two runs.

    gradblock bench --json run.json ...                  # write every row of every table run
    gradblock bench --compare old.json new.json --threshold 0.1

A row is {"table", "key", "workload", "threads", "implementation", "time_ms", "gbps",
"of_copy", "labels", "metrics"}: the common fields where the table has them (None
otherwise), `labels` the row's identifying cells, `metrics` every numeric cell by column.
The check pairs rows by (table, labels) and flags a row whose time grew, or whose rate
(any "GB/s" metric) fell, by more than the threshold (0.1 = 10 %).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from gradblock.codec import fileio
from gradblock.codec.errors import GradblockError

from .tables import Table

FORMAT = "gradblock-bench-rows/1"
# the column each common field is read from, first match wins
_FIELDS = {"workload": ("workload", "model"),
           "implementation": ("implementation", "codec", "method", "compressor", "module"),
           "time_ms": ("time (ms)", "step (ms)"),
           "gbps": ("GB/s", "encode GB/s"),
           "of_copy": ("of copy",)}


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def table_rows(number: int, table: Table) -> list[dict]:
    """The JSON rows of one table (`number` is its place in the report, 1-5)."""
    rows = []
    for rec in table.records:
        labels = {}
        for col in table.columns:            # the leading text cells identify the row
            v = rec.get(col)
            if not isinstance(v, str) or col == "status":
                break
            labels[col] = v
        row = {"table": number, "key": table.key, "labels": labels}
        for name, cols in _FIELDS.items():
            row[name] = next((rec[c] for c in cols if c in rec), None)
        threads = rec.get("threads")
        row["threads"] = int(threads) if isinstance(threads, str) and threads.isdigit() else threads
        row["metrics"] = {c: float(v) for c, v in rec.items() if _number(v)}
        if "status" in rec:
            row["status"] = rec["status"]
        rows.append(row)
    return rows


def write_json(path: Path, tables: dict[int, list[Table]], header: list[str]) -> None:
    """All rows of the tables run, atomically (temp file in the same directory, then rename)."""
    rows = [r for number in sorted(tables) for t in tables[number] for r in table_rows(number, t)]
    doc = {"format": FORMAT, "header": header, "rows": rows}
    fileio.write_text(path, json.dumps(doc, indent=1) + "\n")


class CompareError(GradblockError):
    """A results file that is not a gradblock bench JSON."""


def load_rows(path: Path) -> list[dict]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise CompareError(f"{path}: cannot read bench results ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise CompareError(f"{path}: no 'rows' list (write one with gradblock bench --json)")
    rows = [r for r in doc["rows"] if isinstance(r, dict)]
    for r in rows:
        if not isinstance(r.get("labels"), dict) or "table" not in r:
            raise CompareError(f"{path}: a row without 'table' and 'labels'")
    return rows


def _key(row: dict) -> tuple:
    return (row["table"], tuple(sorted((str(k), str(v)) for k, v in row["labels"].items())))


@dataclass(frozen=True)
class Change:
    key: tuple
    metric: str
    old: float
    new: float
    slowdown: float          # > 0: worse by this fraction (time up or rate down)

    def describe(self) -> str:
        table, labels = self.key
        where = ", ".join(v for _, v in labels)
        return (f"table {table} [{where}] {self.metric}: {self.old:.4g} -> {self.new:.4g} "
                f"({self.slowdown:+.0%} slower)")


def _slowdowns(old: dict, new: dict):
    """(metric, old, new, slowdown) for the row's time, else its rates."""
    t_old, t_new = old.get("time_ms"), new.get("time_ms")
    if _number(t_old) and _number(t_new) and t_old > 0:
        yield "time_ms", t_old, t_new, t_new / t_old - 1
        return
    om, nm = old.get("metrics") or {}, new.get("metrics") or {}
    for m in sorted(set(om) & set(nm)):
        if "GB/s" in m and _number(om[m]) and _number(nm[m]) and nm[m] > 0:
            yield m, om[m], nm[m], om[m] / nm[m] - 1


def compare(old_rows: list[dict], new_rows: list[dict], threshold: float) -> tuple[list[Change], int]:
    """(regressions beyond threshold, number of rows compared)."""
    if not (threshold >= 0):
        raise CompareError(f"threshold must be >= 0, got {threshold}")
    old = {_key(r): r for r in old_rows}
    found, compared = [], 0
    for r in new_rows:
        o = old.get(_key(r))
        if o is None:
            continue
        compared += 1
        for metric, a, b, slow in _slowdowns(o, r):
            if slow > threshold:
                found.append(Change(_key(r), metric, a, b, slow))
    return found, compared


def compare_main(old: Path, new: Path, threshold: float, out=print) -> int:
    """Print the regressions; 0 when none, 1 when some. Unreadable input raises CompareError
    (one line, exit 2 through gradblock.cli)."""
    changes, compared = compare(load_rows(old), load_rows(new), threshold)
    for c in changes:
        out(f"REGRESSION {c.describe()}")
    out(f"{compared} rows compared, {len(changes)} slower by more than {threshold:.0%}")
    return 1 if changes else 0
