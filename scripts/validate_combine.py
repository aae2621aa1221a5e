"""Combine the rows of several `gradblock validate` output directories into one table, JSON
and accuracy-compression figure (how docs/validation/combined_* were made):

    python scripts/validate_combine.py docs/validation docs/validation/main \
        docs/validation/baselines docs/validation/unmasked docs/validation/warmup ...

Rows of directories other than `main` / `baselines` get the directory name appended; Δ is
recomputed against the first `dense` row. Every input must come from the same machine."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from gradblock.shim.training.report import format_row_table, plot_acc_compression, write_json


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out, sources = Path(argv[0]), argv[1:]
    rows = []
    for d in sources:
        data = json.loads((Path(d) / "validate.json").read_text())
        tag = Path(d).name
        for r in data["rows"]:
            r = dict(r)
            if tag not in ("main", "baselines"):
                r["name"] = f"{r['name']} ({tag})"
            rows.append(r)
    dense = next((r for r in rows if r["name"] == "dense"), None)
    for r in rows:
        r["delta_vs_dense_pts"] = None if dense is None else 100 * (r["acc_mean"] - dense["acc_mean"])
    write_json(out / "combined.json", {"rows": rows, "sources": sources})
    plot_acc_compression(rows, out / "combined_acc_compression.png",
                         title="Fashion-MNIST / LeNet-5, 4 x 32, lr 0.05, m 0.9, R 100; "
                               "mean ± std over seeds")
    print(format_row_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
