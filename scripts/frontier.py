"""The accuracy-bytes frontier (docs/training.md): every compressor family at several byte
budgets, each row over several seeds, as a table and a figure with error bars.

    python scripts/frontier.py --out runs/frontier                       # the full run
    python scripts/frontier.py --out runs/frontier-small --train-subset 12800 --test-subset 2000 \
        --epochs 2                                                       # a reduced budget

Rows (LeNet-5 on Fashion-MNIST unless --data / --model say otherwise; 4 workers x 32; lr 0.05;
compressed rows with momentum correction 0.9 and R = 100, dense with global momentum 0.9):
coarse with one filter / FC row a block (k = 1, 2, 4), with blocks of 256, 64 and 16 elements
at fractions of the blocks chosen near the same byte budgets, coarse k = 1 without correction,
coarse with the L2 block norm, topk and dlgs at densities whose bytes match those budgets
(a sparse packet moves two words an element, so density 1/(2X) is about X times fewer bytes),
dense, and with --peers torch's fp16 and powerSGD hooks.

Each finished run is kept as RUNS/<row>.s<seed>.json, so an interrupted run picks up where it
stopped (delete the directory to start over; a run with other settings is refused). Writes
frontier.json, frontier.md and frontier.png (mean accuracy against compression, log axis,
error bar = sample std over the seeds, one colour per family) into --out.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from gradblock.shim.setup.config import TrainConfig  # noqa: E402
from gradblock.shim.training.report import _mean_std  # noqa: E402

CORR = dict(local_momentum=0.9, momentum=0.0, range=100.0)

# (name, family, TrainConfig overrides)
ROWS = [
    ("dense", "dense", dict(compressor="dense", momentum=0.9)),
    ("coarse-row-k1", "coarse, filter/row blocks", dict(compressor="coarse", k=1, **CORR)),
    ("coarse-row-k2", "coarse, filter/row blocks", dict(compressor="coarse", k=2, **CORR)),
    ("coarse-row-k4", "coarse, filter/row blocks", dict(compressor="coarse", k=4, **CORR)),
    ("coarse-B256-k0.012", "coarse, B = 256", dict(compressor="coarse", block_size=256, k=0.012, **CORR)),
    ("coarse-B256-k0.03", "coarse, B = 256", dict(compressor="coarse", block_size=256, k=0.03, **CORR)),
    ("coarse-B64-k0.009", "coarse, B = 64", dict(compressor="coarse", block_size=64, k=0.009, **CORR)),
    ("coarse-B64-k0.0143", "coarse, B = 64", dict(compressor="coarse", block_size=64, k=0.0143, **CORR)),
    ("coarse-B16-k0.006", "coarse, B = 16", dict(compressor="coarse", block_size=16, k=0.006, **CORR)),
    ("coarse-B16-k0.012", "coarse, B = 16", dict(compressor="coarse", block_size=16, k=0.012, **CORR)),
    ("coarse-row-k1-uncorrected", "coarse, no correction", dict(compressor="coarse", k=1, momentum=0.9,
                                                                range=100.0)),
    ("coarse-row-k1-l2", "coarse, L2 norm", dict(compressor="coarse", k=1, norm="l2", **CORR)),
    ("coarse-row-k4-l2", "coarse, L2 norm", dict(compressor="coarse", k=4, norm="l2", **CORR)),
    ("topk-d1/140", "topk", dict(compressor="topk", density=1 / 140, **CORR)),
    ("topk-d1/60", "topk", dict(compressor="topk", density=1 / 60, **CORR)),
    ("topk-d1/36", "topk", dict(compressor="topk", density=1 / 36, **CORR)),
    ("dlgs-d1/140", "dlgs", dict(compressor="dlgs", density=1 / 140, **CORR)),
    ("dlgs-d1/36", "dlgs", dict(compressor="dlgs", density=1 / 36, **CORR)),
]
PEER_ROWS = [
    ("fp16", "torch peers", dict(compressor="fp16", momentum=0.9)),
    ("powersgd-r1", "torch peers", dict(compressor="powersgd", powersgd_rank=1, momentum=0.9)),
    ("powersgd-r2", "torch peers", dict(compressor="powersgd", powersgd_rank=2, momentum=0.9)),
]


def rows_for(args) -> list[tuple[str, str, dict]]:
    rows = ROWS + (PEER_ROWS if args.peers else [])
    fields = TrainConfig.__dataclass_fields__
    rows = [r for r in rows if all(k in fields for k in r[2])]     # e.g. --norm not built yet
    if args.rows:
        wanted = set(args.rows)
        unknown = wanted - {r[0] for r in rows}
        if unknown:
            sys.exit(f"frontier: unknown row(s) {sorted(unknown)}")
        rows = [r for r in rows if r[0] in wanted]
    return rows


def run_all(args) -> list[dict]:
    from gradblock.shim.setup.data import load_dataset
    from gradblock.shim.training.trainer import run_training
    runs_dir = Path(args.out) / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    base = TrainConfig(data=args.data, model=args.model, epochs=args.epochs, workers=4,
                       batch_size=32, lr=0.05, threads=args.threads, progress=False,
                       train_subset=args.train_subset, test_subset=args.test_subset,
                       **({"lr_schedule": args.lr_schedule} if args.lr_schedule else {}))
    dataset = load_dataset(base.data, base.data_dir)
    out = []
    for name, family, over in rows_for(args):
        for seed in args.seeds:
            cfg = replace(base, seed=seed, **over)
            path = runs_dir / f"{name.replace('/', '_')}.s{seed}.json"
            want = json.loads(json.dumps(cfg.run_config()))
            if path.exists():
                r = json.loads(path.read_text())
                saved = dict(r["run_config"])
                if want.get("model") is None:         # the run filled in the dataset's model
                    saved["model"] = None
                if saved != want:
                    sys.exit(f"frontier: {path} holds a run with other settings; use another --out")
            else:
                print(f"frontier: {name} seed {seed}", file=sys.stderr, flush=True)
                res = run_training(cfg, dataset=dataset)
                r = {"row": name, "family": family, "seed": seed,
                     "run_config": want, "acc": res["final_test_acc"],
                     "bytes_sent": res["bytes_sent"], "dense_bytes": res["dense_bytes"],
                     "compression": res["compression_ratio"], "steps": res["steps"],
                     "sat": [res["sat_quant"], res["sat_feedback"], res["sat_momentum"]],
                     "wall_s": res["wall_s"]}
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(r, indent=1) + "\n")
                tmp.replace(path)
            out.append(r)
    return out


def summarise(runs: list[dict]) -> list[dict]:
    rows = {}
    for r in runs:
        rows.setdefault(r["row"], []).append(r)
    table = []
    for name, rs in rows.items():
        mean, std = _mean_std([r["acc"] for r in rs])
        table.append({"row": name, "family": rs[0]["family"], "seeds": [r["seed"] for r in rs],
                      "accs": [r["acc"] for r in rs], "acc_mean": mean, "acc_std": std,
                      "compression": sum(r["dense_bytes"] for r in rs) / sum(r["bytes_sent"] for r in rs),
                      "steps": rs[0]["steps"], "saturations": [sum(r["sat"][i] for r in rs) for i in range(3)]})
    dense = next((t for t in table if t["row"] == "dense"), None)
    for t in table:
        t["delta_pts"] = None if dense is None else 100 * (t["acc_mean"] - dense["acc_mean"])
    return table


def write(args, table: list[dict]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out = Path(args.out)
    title = (f"{args.data} / {args.model or 'default model'}, 4 workers x 32, {args.epochs} epoch(s)"
             + (f", train subset {args.train_subset}" if args.train_subset else "")
             + (f", test subset {args.test_subset}" if args.test_subset else "")
             + (f", lr schedule {args.lr_schedule}" if args.lr_schedule else "")
             + f", seeds {' '.join(map(str, args.seeds))}")
    lines = [title, "", "| row | family | test acc mean ± std | each seed | Δ vs dense (pts) | compression "
             "| sat q/f/m |", "|---|---|---|---|---|---|---|"]
    for t in sorted(table, key=lambda t: -t["compression"]):
        each = " / ".join(f"{a:.4f}" for a in t["accs"])
        d = "–" if t["delta_pts"] is None or t["row"] == "dense" else f"{t['delta_pts']:+.2f}"
        lines.append(f"| {t['row']} | {t['family']} | {t['acc_mean']:.4f} ± {t['acc_std']:.4f} | {each} "
                     f"| {d} | {t['compression']:.1f}x | {'/'.join(map(str, t['saturations']))} |")
    (out / "frontier.md").write_text("\n".join(lines) + "\n")
    (out / "frontier.json").write_text(json.dumps({"description": title, "rows": table}, indent=1) + "\n")
    fig, ax = plt.subplots(figsize=(9, 5.5))
    fams = list(dict.fromkeys(t["family"] for t in table))
    for i, fam in enumerate(fams):
        pts = sorted((t for t in table if t["family"] == fam), key=lambda t: t["compression"])
        ax.errorbar([t["compression"] for t in pts], [t["acc_mean"] for t in pts],
                    yerr=[t["acc_std"] for t in pts], fmt="o-" if len(pts) > 1 else "o",
                    capsize=3, label=fam, color=f"C{i}")
    ax.set_xscale("log")
    ax.set_xlabel("compression (dense bytes / bytes sent, every byte of the packets counted)")
    ax.set_ylabel("final test accuracy (mean ± std over seeds)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.set_title(title + "\n(python scripts/frontier.py; 2-core AMD EPYC, AVX2, --threads 1)",
                 fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "frontier.png", dpi=110)
    plt.close(fig)
    print("\n".join(lines))
    print(f"wrote {out}/frontier.md, frontier.json, frontier.png")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None, help="output directory (required unless --list)")
    p.add_argument("--data", default="fashion-mnist")
    p.add_argument("--model", default=None)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--train-subset", type=int, default=None)
    p.add_argument("--test-subset", type=int, default=None)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lr-schedule", default=None, choices=("cosine",))
    p.add_argument("--rows", nargs="+", default=None, help="only these rows")
    p.add_argument("--peers", action="store_true", help="also torch's fp16 and powerSGD hooks")
    p.add_argument("--list", action="store_true", help="list the rows and exit")
    args = p.parse_args(argv)
    if args.list:
        for name, fam, over in rows_for(args):
            print(f"{name:28s} {fam:28s} {over}")
        return 0
    if not args.out:
        p.error("--out is required")
    write(args, summarise(run_all(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
